package dict

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// Trainer is a writing process's side of the store's dictionaries.
type Trainer struct {
	// t is the tuning, fixed at New (but SetBudget changes SmallShare
	// and SmallBurst with budget held)
	t Tuning
	// cur is what this process's events frames are compressed with (nil:
	// none yet): a copy of the set's, whose encoders (built once, shared
	// by all sessions) go with it when it is replaced
	cur  atomic.Pointer[segment.Dict]
	kick chan struct{}

	// training: what decides when a dictionary is due, and the samples
	// it is trained from. After the engine's DB.mu (engine/doc.go, Lock
	// order).
	training struct {
		sync.Mutex
		// collecting: the pool is kept (a training is to come); pool
		// holds the raw payloads this process encoded last, oldest
		// first, poolN bytes (at most about t.Pool)
		collecting bool
		pool       [][]byte
		poolN      int
		// passed: small frames not sampled since the last one, once the
		// pool was full (then one in poolStride is)
		passed int
		// small: raw bytes of small events frames encoded since New
		small int
		// busy: a training was asked for and has not finished (Done)
		busy bool
		// seen: raw bytes encoded since cur was taken (or New)
		seen int
		// the window: raw and stored bytes of frames compressed with cur
		winRaw, winStored int
		// base: the ratio of the first window with cur (0 until measured)
		base     float64
		failedAt time.Time
		// total: raw bytes of events frames encoded since New; hist: the
		// length of cur (0: none); drifted: the pool refills for drift
		// (not growth); nextAt: the total before which no growth is
		// tried (a larger dictionary did not pay at half of it);
		// forced: Ask asked for this renewal; declined: trainings that
		// did not pay
		total, hist, nextAt int
		drifted, forced     bool
		declined            int
		// waited: Observes to let pass before the next look at the
		// clock and the CPU budget, while a due training waits for them
		// (a look on every frame was a lock and two reads of the clock
		// per flush)
		waited int
		looks  int // how many looks Observe took (tests)
		// asked: the channels of the Asks no renewal has begun for yet;
		// begun: those of the renewal in progress (Begin), closed by its
		// Done
		asked, begun []chan struct{}
	}

	// budget: the CPU budget of small frames (EncodeSmall): left as of
	// at. After training: the last lock of the engine's order.
	budget struct {
		sync.Mutex
		left time.Duration
		at   time.Time
	}
}

// New returns a Trainer with tuning t, without a dictionary, collecting
// samples for its first.
func New(t Tuning) *Trainer {
	d := &Trainer{t: t, kick: make(chan struct{}, 1)}
	d.training.collecting = true
	return d
}

// Tuning returns d's tuning.
func (d *Trainer) Tuning() Tuning {
	d.budget.Lock()
	defer d.budget.Unlock()
	return d.t
}

// Cur returns the dictionary this process's frames are compressed with
// (nil: none yet).
func (d *Trainer) Cur() *segment.Dict { return d.cur.Load() }

// Kick receives when a dictionary is due (Observe, Ask): its owner then
// calls Renew, and Done after it.
func (d *Trainer) Kick() <-chan struct{} { return d.kick }

// Load takes the newest dictionary of the store in dir, if there is one,
// at a write open: a damaged one fails the open (reported, never
// skipped).
func (d *Trainer) Load(fsys vfs.FS, dir string, dicts *segment.Dicts) error {
	id, err := segment.NewestDict(fsys, dir)
	if err != nil || id == 0 {
		return err
	}
	nd, err := dicts.Get(id)
	if err != nil {
		return err
	}
	if err := segment.SyncDict(fsys, dir, id); err != nil {
		return err // (its maker may have died before its fsyncs)
	}
	d.use(nd, true)
	return nil
}

// use makes nd the dictionary of this process's frames; last says no
// training is to follow (until drift): the pool is let go.
func (d *Trainer) use(nd *segment.Dict, last bool) {
	d.cur.Store(nd.Clone())
	d.training.Lock()
	d.training.seen, d.training.winRaw, d.training.winStored, d.training.base = 0, 0, 0, 0
	d.training.hist, d.training.drifted = nd.Len(), false
	if last {
		d.training.collecting, d.training.pool, d.training.poolN = false, nil, 0
	}
	d.training.Unlock()
}

// poolStride: once the pool is full, one small frame in poolStride is
// sampled (each a copy, on the flush path): the pool still turns over to
// what is written now, at an eighth of the copies.
const poolStride = 8

// sample says whether the next small frame is copied into the pool: each
// until it is full, then one in poolStride. Called with d.training held.
func (d *Trainer) sample() bool {
	if d.training.poolN < d.t.Pool {
		return true
	}
	if d.training.passed++; d.training.passed < poolStride {
		return false
	}
	d.training.passed = 0
	return true
}

// dueStride: while a training is due and waits for the back-off or the
// CPU budget, Observe looks again once in dueStride calls.
const dueStride = 64

// Observe records encoded events frames: their payloads as training
// input while a training is to come, their sizes for the ratio. It sends
// on Kick when a dictionary is due. Called on the flush path: cheap.
func (d *Trainer) Observe(es []*segment.Encoded) {
	d.training.Lock()
	cur := d.cur.Load()
	for _, e := range es {
		raw := e.Raw()
		if len(raw) < d.t.Small {
			d.training.small += len(raw)
		}
		if d.training.collecting && len(raw) < d.t.Small && d.sample() { // (a store of large frames only trains none)
			// A sample is a small frame's payload, as the frames the
			// dictionary is for are: a large one (a tool result of
			// hundreds of KiB) would fill the pool and the history.
			// A copy: the frame's buffers go back to their pool once placed.
			d.training.pool = append(d.training.pool, bytes.Clone(raw))
			d.training.poolN += len(raw)
			for d.training.poolN-len(d.training.pool[0]) >= d.t.Pool {
				d.training.poolN -= len(d.training.pool[0])
				d.training.pool[0] = nil
				d.training.pool = d.training.pool[1:]
			}
		}
		d.training.seen += len(raw)
		d.training.total += len(raw)
		if e.Dict() != 0 {
			d.training.winRaw += len(raw)
			d.training.winStored += e.StoredLen()
		}
	}
	due := false
	switch {
	case !d.training.collecting && d.training.winRaw >= d.t.Window:
		r := float64(d.training.winStored) / float64(d.training.winRaw)
		d.training.winRaw, d.training.winStored = 0, 0
		if d.training.base == 0 {
			d.training.base = r
		} else if r > d.training.base*d.t.Drift && d.training.seen >= d.t.RetrainMin {
			// the next training learns from what comes now
			d.training.collecting, d.training.drifted = true, true
		}
	case !d.training.collecting && cur != nil && d.training.total >= d.training.nextAt &&
		d.historyFor(2*d.training.total) > d.training.hist:
		// Half way to a larger dictionary: the pool refills for it.
		d.training.collecting = true
	case !d.training.collecting && cur == nil && d.training.total >= d.training.nextAt:
		// The first did not pay: tried again, on fresh samples.
		d.training.collecting = true
	case d.training.collecting && cur == nil:
		due = d.training.small >= d.t.TrainAfter && d.training.poolN >= min(d.t.TrainAfter, d.t.Pool)
	case d.training.collecting:
		h := d.historyFor(d.training.total)
		due = d.training.poolN >= min(d.t.Pool, 4*h) && (d.training.drifted || h > d.training.hist)
	}
	due = due && !d.training.busy
	switch {
	case !due:
	case d.training.waited > 0:
		d.training.waited--
		due = false
	default:
		d.training.looks++
		if time.Since(d.training.failedAt) < backoff || !d.spare() {
			d.training.waited = dueStride - 1
			due = false
		}
	}
	if due {
		d.training.busy = true
	}
	d.training.Unlock()
	if due {
		d.send()
	}
}

// send wakes the owner's loop (Kick), unless a wake-up is pending.
func (d *Trainer) send() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Ask has the owner renew the dictionary now, as Observe does when one is
// due (a test's). The channel it returns is closed by the Done of a
// renewal that began after the Ask (Begin), once the owner has done what
// that renewal's outcome calls for: a renewal already in progress when
// Ask is called does not close it, its Done does not clear Busy, and the
// next renewal is forced (Renew).
func (d *Trainer) Ask() <-chan struct{} {
	ch := make(chan struct{})
	d.training.Lock()
	d.training.busy, d.training.forced = true, true
	d.training.asked = append(d.training.asked, ch)
	d.training.Unlock()
	d.send()
	return ch
}

// Begin marks the start of a renewal Kick asked for: the Asks made
// before it are answered by its Done. The owner calls it once it has
// received from Kick, before it renews.
func (d *Trainer) Begin() {
	d.training.Lock()
	d.training.begun = append(d.training.begun, d.training.asked...)
	d.training.asked = nil
	d.training.Unlock()
}

// Done records the end of a renewal Kick asked for: err, if not nil,
// holds the next one off for the back-off. It answers the Asks its Begin
// took: the owner calls it once it has acted on err (a failed fsync
// poisons the store before an Ask returns). An Ask made since stays
// pending, and Busy with it.
func (d *Trainer) Done(err error) {
	d.training.Lock()
	pending := len(d.training.asked) > 0
	d.training.busy, d.training.forced = pending, pending
	if err != nil {
		d.training.failedAt = time.Now()
	}
	begun := d.training.begun
	d.training.begun = nil
	d.training.Unlock()
	for _, ch := range begun {
		close(ch)
	}
}

// State is what a Trainer holds for its next training.
type State struct {
	// Collecting: samples are kept (a training is to come); Samples
	// payloads of Bytes bytes are kept
	Collecting     bool
	Samples, Bytes int
	// Busy: a renewal was asked for and is not done
	Busy bool
	// Total: raw bytes of events frames encoded; Declined: dictionaries
	// trained and not kept, since they would not have paid for their
	// file (Renew)
	Total, Declined int
}

// State returns d's state.
func (d *Trainer) State() State {
	d.training.Lock()
	defer d.training.Unlock()
	return State{Collecting: d.training.collecting, Samples: len(d.training.pool), Bytes: d.training.poolN, Busy: d.training.busy,
		Total: d.training.total, Declined: d.training.declined}
}

// Renew replaces the current dictionary: by one another process made
// since, if there is one, else by one trained from this process's recent
// payloads, stored in dir as the store's newest and added to dicts.
// Called with the store's dictionary lock (coord.LockDict) held, so that
// processes do not train one each.
func (d *Trainer) Renew(fsys vfs.FS, dir string, dicts *segment.Dicts) error {
	newest, err := segment.NewestDict(fsys, dir)
	if err != nil {
		return err
	}
	if cur := d.cur.Load(); newest != 0 && (cur == nil || newest != cur.ID) {
		nd, err := dicts.Get(newest)
		if err != nil {
			return err
		}
		// Another process made it: durable before a frame names it (its
		// maker may have died, or failed its fsync, after the rename).
		if err := segment.SyncDict(fsys, dir, newest); err != nil {
			return err
		}
		d.use(nd, true)
		return nil
	}
	d.training.Lock()
	samples, total, forced := slices.Clone(d.training.pool), d.training.total, d.training.forced
	d.training.Unlock()
	for try := 0; ; try++ {
		// zstd leaves IDs under 32768 to registered dictionaries.
		nd, err := segment.TrainDict(32768+rand.Uint32N(math.MaxUint32-32768), time.Now().UnixNano(), samples, d.historyFor(total))
		if err != nil {
			return err
		}
		if try == 0 && !forced && !d.pays(nd, samples, total) {
			// Not kept: no file. Tried again once the process has
			// written twice as much.
			d.training.Lock()
			d.training.collecting, d.training.pool, d.training.poolN = false, nil, 0
			d.training.drifted, d.training.nextAt = false, 2*total
			d.training.declined++
			d.training.Unlock()
			return nil
		}
		err = segment.WriteDict(fsys, dir, nd)
		if errors.Is(err, fs.ErrExist) && try < 3 {
			continue // that ID is taken
		}
		if err != nil {
			return err
		}
		dicts.Add(nd)
		d.use(nd, true)
		return nil
	}
}

// historyFor returns the content of a dictionary trained when total raw
// bytes were encoded: total/Share rounded down to a power of two, within
// [MinHistory, History].
func (d *Trainer) historyFor(total int) int {
	h := max(d.t.MinHistory, 1)
	for h*2 <= total/max(d.t.Share, 1) {
		h *= 2
	}
	return min(h, d.t.History)
}

// evalBytes bounds the samples pays compresses.
const evalBytes = 64 << 10

// pays reports whether dictionary nd pays for its file: the bytes it
// saves on samples (against the current dictionary, or none), in
// proportion over as many raw bytes again as the process has encoded
// (total: what it has written predicts what it will), exceed the file's.
func (d *Trainer) pays(nd *segment.Dict, samples [][]byte, total int) bool {
	cur := d.cur.Load()
	n := 0
	for _, s := range samples {
		n += len(s)
	}
	step := max(n/evalBytes, 1) // every step-th sample: about evalBytes of them
	var raw, saved int
	for i := len(samples) - 1; i >= 0; i -= step {
		s := samples[i]
		raw += len(s)
		saved += segment.StoredLen(cur, s) - segment.StoredLen(nd, s)
	}
	if raw == 0 {
		return false
	}
	return int64(saved)*int64(total)/int64(raw) > int64(segment.DictFileSize(nd))
}
