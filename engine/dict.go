package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
)

// Dictionaries (docs/DESIGN.md, Dictionaries): a writing process trains a
// zstd dictionary from the events it writes once it has written
// dictTrainAfter bytes of small frames (under dictSmall raw bytes: zstd
// alone compresses larger ones well; a store written only in large
// frames never trains one), and once more when it has written dictPool
// bytes (more history, a better choice of content). It keeps the raw
// payloads of the small frames it writes in a pool of at most dictPool bytes only
// until then, and again when its frames compress dictDrift worse than
// they did with the current dictionary (the pool filled anew, then a new
// one trained). Training runs on a goroutine of its own, never on the
// flush path, and a failure of it is logged and leaves the store
// without a new dictionary (it never takes the process down: see
// segment.TrainDict). A dictionary is durable in the store's directory
// (segment.WriteDict; segment.SyncDict for one another process made)
// before a frame names it. Its ID is random, so that a
// dictionary file lost to damage is never replaced by another of the same
// ID that its frames would be decoded with. Dictionaries are made under
// coord.LockDict, and a process about to train takes the newest dictionary
// instead if another process made it. Readers load the dictionaries that
// frames name from the directory (segment.Dicts).
// Dictionaries are never removed: compaction keeps frames' bytes as they
// are, so every dictionary a frame ever named stays readable.
// (These are the defaults of a DB's dictTuning; a test's DB may have
// others, testingKnobs.dict.)
const (
	// dictTrainAfter: raw bytes of small events frames a process
	// encodes before it trains the store's first dictionary (or takes
	// another's)
	dictTrainAfter = 128 << 10
	// dictSmall: events frames under this many raw bytes count toward
	// dictTrainAfter
	dictSmall = 16 << 10
	// dictHistory: the content a dictionary holds, chosen from the pool
	// (zstd matches against it)
	dictHistory = 160 << 10
	// dictPool: the recent raw payloads a process keeps to train from,
	// and when it has that many it trains its last dictionary (until the
	// ratio drifts)
	dictPool = 512 << 10
	// dictWindow: raw bytes of frames compressed with the dictionary over
	// which their ratio is measured; the first window after a dictionary
	// is taken is its baseline
	dictWindow = 256 << 10
	// dictDrift: a window whose ratio (stored/raw) is this many times the
	// baseline's makes the process fill its pool anew and train a new
	// dictionary from it
	dictDrift = 1.25
	// dictRetrainMin: raw bytes a process encodes with a dictionary
	// before it replaces it for drift
	dictRetrainMin = 1 << 20
)

// The CPU budget of the dictionary's work beyond what a store without one
// does: compressing small frames (those under segment.DefaultMinCompress
// raw bytes, stored as they are without a dictionary) and training. A
// small frame costs ~10 µs of CPU on the flush path against nothing; where
// many sessions flush one event each at once the CPU bounds group commit
// (64 sessions on 2 cores: ~20 µs of CPU an event), and compressing every
// frame cost 0.53x the events/s; training costs ~20-50 ms. So the budget
// is a share of one core (dictSmallShare), with a burst: a small frame is
// compressed with the dictionary while the budget is positive (and
// charged dictSmallCost), else stored as it is; before there is a
// dictionary each small frame charges what compressing it would take,
// and a dictionary is trained only while half the burst is left (spare
// CPU: 64 sessions flushing one event each drain the burst before they
// have written enough to train from). A host flushing turns (a few thousand frames a second at
// most) stays within it; a store flushing single events as fast as the
// disk allows trains none.
const (
	dictSmallShare = 0.10
	dictSmallBurst = 4 * time.Millisecond
	dictSmallCost  = 10 * time.Microsecond
)

// dictTuning is how a process trains its dictionary and budgets its
// small frames: the constants above, or a test's (testingKnobs.dict).
type dictTuning struct {
	trainAfter, small, history, pool, window, retrainMin int
	drift                                                float64
	smallShare                                           float64
	smallBurst, smallCost                                time.Duration
}

func defaultDictTuning() dictTuning {
	return dictTuning{
		trainAfter: dictTrainAfter, small: dictSmall, history: dictHistory,
		pool: dictPool, window: dictWindow, retrainMin: dictRetrainMin,
		drift: dictDrift, smallShare: dictSmallShare,
		smallBurst: dictSmallBurst, smallCost: dictSmallCost,
	}
}

// refillLocked brings the budget up to now. Called with d.budget held.
func (d *dictState) refillLocked(now time.Time) {
	if d.budget.at.IsZero() {
		d.budget.left = d.t.smallBurst
	} else {
		d.budget.left = min(d.t.smallBurst, d.budget.left+time.Duration(float64(now.Sub(d.budget.at))*d.t.smallShare))
	}
	d.budget.at = now
}

// spare reports whether half the burst of the budget is left.
func (d *dictState) spare() bool {
	d.budget.Lock()
	defer d.budget.Unlock()
	d.refillLocked(time.Now())
	return d.budget.left > 0 && d.budget.left >= d.t.smallBurst/2
}

// encodeSmall encodes the events evs of session id as one small frame
// with enc: with its dictionary if it has one and the budget allows. The
// budget is charged dictSmallCost, not the time taken, which depends as
// much on what else the machine runs.
func (d *dictState) encodeSmall(enc segment.Encoder, id string, evs []event.Event) (*segment.Encoded, error) {
	d.budget.Lock()
	d.refillLocked(time.Now())
	switch {
	case enc.Dict == nil: // none yet: charged what one would take
		d.budget.left = max(d.budget.left-d.t.smallCost, -d.t.smallBurst)
	case d.budget.left > 0:
		d.budget.left -= d.t.smallCost
	default:
		enc.Dict = nil // over the budget: stored as it is
	}
	d.budget.Unlock()
	return enc.Events(id, evs[0].Seq, evs)
}

// dictBackoff is how long a process waits after a failed training (a full
// disk) before it tries again.
const dictBackoff = 5 * time.Second

// dictState is a writing process's side of the store's dictionaries.
type dictState struct {
	db *DB
	// t is the tuning, fixed at the open (but a test changes smallShare
	// and smallBurst with budget held)
	t dictTuning
	// cur is what this process's events frames are compressed with (nil:
	// none yet): a copy of the set's, whose encoders (built once, shared
	// by all sessions) go with it when it is replaced
	cur  atomic.Pointer[segment.Dict]
	kick chan struct{}

	// training: what decides when a dictionary is due, and the samples
	// it is trained from. After DB.mu (doc.go, Lock order).
	training struct {
		sync.Mutex
		// collecting: the pool is kept (a training is to come); pool
		// holds the raw payloads this process encoded last, oldest
		// first, poolN bytes (at most about dictPool)
		collecting bool
		pool       [][]byte
		poolN      int
		// small: raw bytes of small events frames encoded since the open
		small int
		// busy: a training was asked for and has not finished
		busy bool
		// seen: raw bytes encoded since cur was taken (or the open)
		seen int
		// the window: raw and stored bytes of frames compressed with cur
		winRaw, winStored int
		// base: the ratio of the first window with cur (0 until measured)
		base     float64
		failedAt time.Time
	}

	// budget: the CPU budget of small frames (encodeSmall): left as of
	// at. After training: the last lock of the engine's order.
	budget struct {
		sync.Mutex
		left time.Duration
		at   time.Time
	}
}

func newDictState(db *DB) *dictState {
	t := defaultDictTuning()
	if db.knobs.dict != nil {
		t = *db.knobs.dict
	}
	d := &dictState{db: db, t: t, kick: make(chan struct{}, 1)}
	d.training.collecting = true
	return d
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
	if err := segment.SyncDict(d.db.opts.FS, d.db.dir, id); err != nil {
		return err // (its maker may have died before its fsyncs)
	}
	d.use(nd, true)
	return nil
}

// use makes nd the dictionary of this process's frames; last says no
// training is to follow (until drift): the pool is let go.
func (d *dictState) use(nd *segment.Dict, last bool) {
	d.cur.Store(nd.Clone())
	d.training.Lock()
	d.training.seen, d.training.winRaw, d.training.winStored, d.training.base = 0, 0, 0, 0
	if last {
		d.training.collecting, d.training.pool, d.training.poolN = false, nil, 0
	}
	d.training.Unlock()
}

// observe records encoded events frames: their payloads as training
// input while a training is to come, their sizes for the ratio. It wakes
// the trainer when a dictionary is due. Called on the flush path: cheap.
func (d *dictState) observe(es []*segment.Encoded) {
	d.training.Lock()
	cur := d.cur.Load()
	for _, e := range es {
		raw := e.Raw()
		if len(raw) < d.t.small {
			d.training.small += len(raw)
		}
		if d.training.collecting && len(raw) < d.t.small { // (a store of large frames only trains none)
			// A sample is a small frame's payload, as the frames the
			// dictionary is for are: a large one (a tool result of
			// hundreds of KiB) would fill the pool and the history.
			// A copy: the frame's buffers go back to their pool once placed.
			d.training.pool = append(d.training.pool, bytes.Clone(raw))
			d.training.poolN += len(raw)
			for d.training.poolN-len(d.training.pool[0]) >= d.t.pool {
				d.training.poolN -= len(d.training.pool[0])
				d.training.pool[0] = nil
				d.training.pool = d.training.pool[1:]
			}
		}
		d.training.seen += len(raw)
		if e.Dict() != 0 {
			d.training.winRaw += len(raw)
			d.training.winStored += e.StoredLen()
		}
	}
	due := false
	switch {
	case !d.training.collecting && d.training.winRaw >= dictWindow:
		r := float64(d.training.winStored) / float64(d.training.winRaw)
		d.training.winRaw, d.training.winStored = 0, 0
		if d.training.base == 0 {
			d.training.base = r
		} else if r > d.training.base*d.t.drift && d.training.seen >= d.t.retrainMin {
			d.training.collecting = true // the next training learns from what comes now
		}
	case d.training.collecting && cur == nil:
		due = d.training.small >= d.t.trainAfter
	case d.training.collecting:
		due = d.training.poolN >= d.t.pool
	}
	due = due && !d.training.busy && time.Since(d.training.failedAt) >= dictBackoff && d.spare()
	if due {
		d.training.busy = true
	}
	d.training.Unlock()
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
		err := d.renew()
		d.training.Lock()
		d.training.busy = false
		if err != nil {
			d.training.failedAt = time.Now()
		}
		d.training.Unlock()
		if err != nil {
			if errors.Is(err, segment.ErrSyncFailed) {
				d.db.poisonWith(err)
			}
			d.db.opts.Logger.Warn("engine: making a compression dictionary failed", "error", err)
		}
	}
}

// renew replaces the current dictionary: by one another process made
// since, if there is one, else by one trained from this process's recent
// payloads, stored as the store's next ID. Under coord.LockDict.
func (d *dictState) renew() error {
	db := d.db
	if err := db.poisonErr(); err != nil {
		return nil // nothing more is written
	}
	if err := db.shared.Lock(coord.LockDict, true); err != nil {
		return fmt.Errorf("engine: taking the dictionary lock: %w", err)
	}
	defer db.shared.Unlock(coord.LockDict)
	newest, err := segment.NewestDict(db.opts.FS, db.dir)
	if err != nil {
		return err
	}
	if cur := d.cur.Load(); newest != 0 && (cur == nil || newest != cur.ID) {
		nd, err := db.dicts.Get(newest)
		if err != nil {
			return err
		}
		// Another process made it: durable before a frame names it (its
		// maker may have died, or failed its fsync, after the rename).
		if err := segment.SyncDict(db.opts.FS, db.dir, newest); err != nil {
			return err
		}
		d.use(nd, true)
		return nil
	}
	d.training.Lock()
	samples, n := slices.Clone(d.training.pool), d.training.poolN
	d.training.Unlock()
	for try := 0; ; try++ {
		// zstd leaves IDs under 32768 to registered dictionaries.
		nd, err := segment.TrainDict(32768+rand.Uint32N(math.MaxUint32-32768), time.Now().UnixNano(), samples, d.t.history)
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
		d.use(nd, n >= d.t.pool)
		return nil
	}
}
