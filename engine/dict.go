package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/segment"
)

// Dictionaries (docs/DESIGN.md, Dictionaries): a writing process trains a
// zstd dictionary from the events it writes once it has written
// dictTrainAfter bytes of them; a new one once it has written three times
// what the current one learnt from (up to dictPool: more history, a better
// choice of content), and when its frames compress dictDrift worse than
// they did with the current one. A dictionary is
// durable in the store's directory (segment.WriteDict) before a frame
// names it. Its ID is random, so that a dictionary file lost to damage is
// never replaced by another of the same ID that its frames would be
// decoded with. Dictionaries are made under lockDict, and a process about
// to train takes the newest dictionary instead if another process made
// it. Readers load the dictionaries that frames name from the directory
// (segment.Dicts).
// Dictionaries are never removed: compaction keeps frames' bytes as they
// are, so every dictionary a frame ever named stays readable.
var (
	// dictTrainAfter: raw bytes of events frames a process encodes before
	// it trains the store's first dictionary (or takes another's)
	dictTrainAfter = 128 << 10
	// dictHistory: the content a dictionary holds, chosen from the recent
	// raw payloads (zstd matches against it)
	dictHistory = 112 << 10
	// dictPool: the recent raw payloads a process keeps to train from
	dictPool = 1 << 20
	// dictWindow: raw bytes of frames compressed with the dictionary over
	// which their ratio is measured; the first window after a dictionary
	// is taken is its baseline
	dictWindow = 256 << 10
	// dictDrift: a window whose ratio (stored/raw) is this many times the
	// baseline's makes the process train a new dictionary
	dictDrift = 1.25
	// dictRetrainMin: raw bytes a process encodes with a dictionary
	// before it replaces it
	dictRetrainMin = 1 << 20
)

// dictBackoff is how long a process waits after a failed training (a full
// disk) before it tries again.
const dictBackoff = 5 * time.Second

// dictState is a writing process's side of the store's dictionaries.
type dictState struct {
	db *DB
	// cur is what this process's events frames are compressed with (nil:
	// none yet): a copy of the set's, with an encoder of its own that
	// goes with it when it is replaced
	cur  atomic.Pointer[segment.Dict]
	kick chan struct{}

	mu sync.Mutex
	// recent: the raw payloads this process encoded last, oldest first,
	// about dictPool bytes (the training input)
	recent  [][]byte
	recentN int
	// learnt: the bytes of payloads cur was trained from (dictPool for
	// one another process made)
	learnt int
	// seen: raw bytes encoded since cur was taken (or the open)
	seen int
	// the window: raw and stored bytes of frames compressed with cur
	winRaw, winStored int
	// base: the ratio of the first window with cur (0 until measured)
	base     float64
	failedAt time.Time
}

func newDictState(db *DB) *dictState {
	return &dictState{db: db, kick: make(chan struct{}, 1)}
}

// load takes the newest dictionary of the store, if there is one, at a
// write open: a damaged one fails the open (reported, never skipped).
func (d *dictState) load() error {
	id, err := segment.NewestDict(d.db.opts.FS, d.db.dir)
	if err != nil || id == 0 {
		return err
	}
	nd, err := d.db.dicts.Get(id)
	if err != nil {
		return err
	}
	d.use(nd, dictPool)
	return nil
}

// use makes nd, trained from learnt bytes, the dictionary of this
// process's frames.
func (d *dictState) use(nd *segment.Dict, learnt int) {
	d.cur.Store(nd.Clone())
	d.mu.Lock()
	d.seen, d.winRaw, d.winStored, d.base, d.learnt = 0, 0, 0, 0, learnt
	d.mu.Unlock()
}

// observe records encoded events frames: their payloads as training
// input, their sizes for the ratio. It wakes the trainer when a
// dictionary is due. Called on the flush path: cheap.
func (d *dictState) observe(es []*segment.Encoded) {
	d.mu.Lock()
	for _, e := range es {
		raw := e.Raw()
		d.recent = append(d.recent, raw)
		d.recentN += len(raw)
		for d.recentN-len(d.recent[0]) >= dictPool {
			d.recentN -= len(d.recent[0])
			d.recent[0] = nil
			d.recent = d.recent[1:]
		}
		d.seen += len(raw)
		if e.Dict() != 0 {
			d.winRaw += len(raw)
			d.winStored += e.StoredLen()
		}
	}
	due := false
	switch {
	case d.cur.Load() == nil:
		due = d.seen >= dictTrainAfter
	case d.learnt < dictPool && d.seen >= 3*d.learnt:
		due = true
	case d.winRaw >= dictWindow:
		r := float64(d.winStored) / float64(d.winRaw)
		d.winRaw, d.winStored = 0, 0
		if d.base == 0 {
			d.base = r
		} else {
			due = r > d.base*dictDrift && d.seen >= dictRetrainMin
		}
	}
	due = due && time.Since(d.failedAt) >= dictBackoff
	d.mu.Unlock()
	if due {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

// loop trains (or takes) a dictionary when observe says one is due.
func (d *dictState) loop() {
	defer d.db.wg.Done()
	for {
		select {
		case <-d.db.stop:
			return
		case <-d.kick:
		}
		if err := d.renew(); err != nil {
			d.mu.Lock()
			d.failedAt = time.Now()
			d.mu.Unlock()
			if errors.Is(err, segment.ErrSyncFailed) {
				d.db.poisonWith(err)
			}
			d.db.opts.Logger.Warn("engine: making a compression dictionary failed", "error", err)
		}
	}
}

// renew replaces the current dictionary: by one another process made
// since, if there is one, else by one trained from this process's recent
// payloads, stored as the store's next ID. Under lockDict.
func (d *dictState) renew() error {
	db := d.db
	if err := db.poisonErr(); err != nil {
		return nil // nothing more is written
	}
	if err := db.shared.locks.Lock(lockDict, true); err != nil {
		return fmt.Errorf("engine: taking the dictionary lock: %w", err)
	}
	defer db.shared.locks.Unlock(lockDict)
	newest, err := segment.NewestDict(db.opts.FS, db.dir)
	if err != nil {
		return err
	}
	if cur := d.cur.Load(); newest != 0 && (cur == nil || newest != cur.ID) {
		nd, err := db.dicts.Get(newest)
		if err != nil {
			return err
		}
		d.use(nd, dictPool)
		return nil
	}
	d.mu.Lock()
	samples, n := slices.Clone(d.recent), d.recentN
	d.mu.Unlock()
	for try := 0; ; try++ {
		// zstd leaves IDs under 32768 to registered dictionaries.
		nd, err := segment.TrainDict(32768+rand.Uint32N(math.MaxUint32-32768), time.Now().UnixNano(), samples, dictHistory)
		if err != nil {
			return err
		}
		err = segment.WriteDict(db.opts.FS, db.dir, nd)
		if errors.Is(err, fs.ErrExist) && try < 3 {
			continue // that ID is taken
		}
		if err != nil {
			return err
		}
		db.dicts.Add(nd)
		d.use(nd, n)
		return nil
	}
}
