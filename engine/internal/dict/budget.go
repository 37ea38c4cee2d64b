package dict

import (
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
)

// A writing process trains a zstd dictionary from the events it writes
// once it has written TrainAfter bytes of small frames (under Small raw
// bytes: zstd alone compresses larger ones well; a store written only in
// large frames never trains one), and once more when it has written Pool
// bytes (more history, a better choice of content). It keeps the raw
// payloads of the small frames it writes in a pool of at most Pool bytes
// only until then, and again when its frames compress Drift worse than
// they did with the current dictionary (the pool filled anew, then a new
// one trained). These are the defaults of [Tuning] (a test's DB may have
// others: the engine's testingKnobs.dict).
const (
	// trainAfter: raw bytes of small events frames a process encodes
	// before it trains the store's first dictionary (or takes another's)
	trainAfter = 128 << 10
	// small: events frames under this many raw bytes count toward
	// trainAfter
	small = 16 << 10
	// history: the content a dictionary holds, chosen from the pool
	// (zstd matches against it)
	history = 160 << 10
	// pool: the recent raw payloads a process keeps to train from, and
	// when it has that many it trains its last dictionary (until the
	// ratio drifts)
	pool = 512 << 10
	// window: raw bytes of frames compressed with the dictionary over
	// which their ratio is measured; the first window after a dictionary
	// is taken is its baseline
	window = 256 << 10
	// drift: a window whose ratio (stored/raw) is this many times the
	// baseline's makes the process fill its pool anew and train a new
	// dictionary from it
	drift = 1.25
	// retrainMin: raw bytes a process encodes with a dictionary before
	// it replaces it for drift
	retrainMin = 1 << 20
	// share: a dictionary's content is at most 1/share of the raw bytes
	// of the events frames the process has encoded when it trains it
	// (at least minHistory, at most history), so that the store's
	// dictionaries stay a small share of its segments; a larger one is
	// trained as the process writes more (growth), if it pays
	share = 64
	// minHistory: the smallest dictionary content trained
	minHistory = 8 << 10
)

// The CPU budget of the dictionary's work beyond what a store without one
// does: compressing small frames (those under segment.DefaultMinCompress
// raw bytes, stored as they are without a dictionary) and training. A
// small frame costs ~10 µs of CPU on the flush path against nothing; where
// many sessions flush one event each at once the CPU bounds group commit
// (64 sessions on 2 cores: ~20 µs of CPU an event), and compressing every
// frame cost 0.53x the events/s; training costs ~20-50 ms. So the budget
// is a share of one core (smallShare), with a burst: a small frame is
// compressed with the dictionary while the budget is positive (and
// charged smallCost), else stored as it is; before there is a
// dictionary each small frame charges what compressing it would take,
// and a dictionary is trained only while half the burst is left (spare
// CPU: 64 sessions flushing one event each drain the burst before they
// have written enough to train from). A host flushing turns (a few
// thousand frames a second at most) stays within it; a store flushing
// single events as fast as the disk allows trains none.
const (
	smallShare = 0.10
	smallBurst = 4 * time.Millisecond
	smallCost  = 10 * time.Microsecond
)

// backoff is how long a process waits after a failed training (a full
// disk) before it tries again.
const backoff = 5 * time.Second

// Tuning is how a process trains its dictionary and budgets its small
// frames: DefaultTuning, or a test's.
type Tuning struct {
	TrainAfter, Small, History, Pool, Window, RetrainMin int
	// Share, MinHistory: a dictionary's content is total/Share bytes
	// rounded down to a power of two, within [MinHistory, History]
	Share, MinHistory     int
	Drift                 float64
	SmallShare            float64
	SmallBurst, SmallCost time.Duration
}

// DefaultTuning is the tuning of a store's writing processes.
func DefaultTuning() Tuning {
	return Tuning{
		TrainAfter: trainAfter, Small: small, History: history,
		Pool: pool, Window: window, RetrainMin: retrainMin,
		Share: share, MinHistory: minHistory,
		Drift: drift, SmallShare: smallShare,
		SmallBurst: smallBurst, SmallCost: smallCost,
	}
}

// refillLocked brings the budget up to now. Called with d.budget held.
func (d *Trainer) refillLocked(now time.Time) {
	if d.budget.at.IsZero() {
		d.budget.left = d.t.SmallBurst
	} else {
		d.budget.left = min(d.t.SmallBurst, d.budget.left+time.Duration(float64(now.Sub(d.budget.at))*d.t.SmallShare))
	}
	d.budget.at = now
}

// spare reports whether half the burst of the budget is left.
func (d *Trainer) spare() bool {
	d.budget.Lock()
	defer d.budget.Unlock()
	d.refillLocked(time.Now())
	return d.budget.left > 0 && d.budget.left >= d.t.SmallBurst/2
}

// EncodeSmall encodes the events evs of session id as one small frame
// with enc: with its dictionary if it has one and the budget allows. The
// budget is charged SmallCost, not the time taken, which depends as much
// on what else the machine runs.
func (d *Trainer) EncodeSmall(enc segment.Encoder, id string, evs []event.Event) (*segment.Encoded, error) {
	d.budget.Lock()
	d.refillLocked(time.Now())
	switch {
	case enc.Dict == nil: // none yet: charged what one would take
		d.budget.left = max(d.budget.left-d.t.SmallCost, -d.t.SmallBurst)
	case d.budget.left > 0:
		d.budget.left -= d.t.SmallCost
	default:
		enc.Dict = nil // over the budget: stored as it is
	}
	d.budget.Unlock()
	return enc.Events(id, evs[0].Seq, evs)
}

// SetBudget changes the budget's share of a core and its burst, and
// empties it (a test's).
func (d *Trainer) SetBudget(share float64, burst time.Duration) {
	d.budget.Lock()
	d.t.SmallShare, d.t.SmallBurst = share, burst
	d.budget.left, d.budget.at = 0, time.Time{}
	d.budget.Unlock()
}
