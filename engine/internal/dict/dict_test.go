package dict

import (
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// tuning is a small tuning with all the budget a test needs: the first
// dictionary after 8 KiB of frames under 2 KiB, the last once the pool
// holds 32 KiB.
func tuning() Tuning {
	t := DefaultTuning()
	t.TrainAfter, t.Small, t.Pool, t.History = 8<<10, 2<<10, 32<<10, 8<<10
	t.Share, t.MinHistory = 4, 2<<10
	t.Window, t.RetrainMin = 16<<10, 16<<10
	t.SmallShare, t.SmallBurst = 1e6, time.Second
	return t
}

// frames encodes n frames of one testgen event of size bytes each, from
// seq first on, with enc.
func frames(t *testing.T, enc segment.Encoder, first uint64, n, size int) []*segment.Encoded {
	t.Helper()
	out := make([]*segment.Encoded, n)
	for i := range out {
		e, err := enc.Events("s", first+uint64(i), testgen.Events(first+uint64(i), 1, size))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = e
	}
	return out
}

// kicked reports whether d sent on Kick (and takes it).
func kicked(d *Trainer) bool {
	select {
	case <-d.Kick():
		return true
	default:
		return false
	}
}

// TestObserveDue: the first dictionary is due once TrainAfter bytes of
// small frames are encoded (large frames count for nothing and are no
// samples), once at a time (not again until Done), and not for the
// back-off after a failed one.
func TestObserveDue(t *testing.T) {
	d := New(tuning())
	enc := segment.Encoder{Uncompressed: true}
	d.Observe(frames(t, enc, 0, 20, 4<<10)) // large: 80 KiB
	if st := d.State(); kicked(d) || st.Samples != 0 || st.Busy {
		t.Fatalf("after large frames only: kicked or state %+v; want nothing", st)
	}
	d.Observe(frames(t, enc, 100, 20, 300)) // ~6 KiB of small ones
	if kicked(d) {
		t.Fatal("due before TrainAfter bytes of small frames")
	}
	d.Observe(frames(t, enc, 200, 20, 300))
	if st := d.State(); !kicked(d) || !st.Busy || st.Samples != 40 {
		t.Fatalf("after ~12 KiB of small frames: state %+v; want kicked, busy, 40 samples", st)
	}
	d.Observe(frames(t, enc, 300, 5, 300))
	if kicked(d) {
		t.Fatal("kicked again while the first is not done")
	}
	d.Done(errors.New("disk full"))
	d.Observe(frames(t, enc, 400, 5, 300))
	if kicked(d) || d.State().Busy {
		t.Fatal("kicked within the back-off of a failed training")
	}
}

// TestAskAnsweredByItsRenewal: an Ask is answered (its channel closed)
// by the Done of a renewal that began after it, never by the Done of one
// already in progress; Busy stays set, and the next renewal forced, until
// then.
func TestAskAnsweredByItsRenewal(t *testing.T) {
	d := New(tuning())
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	first := d.Ask()
	if !kicked(d) {
		t.Fatal("Ask kicked nothing")
	}
	d.Begin() // the renewal of the first Ask
	second := d.Ask()
	d.Done(nil)
	if !closed(first) {
		t.Fatal("the first Ask is not answered by the Done of its renewal")
	}
	if closed(second) {
		t.Fatal("an Ask made during a renewal is answered by that renewal's Done")
	}
	if st := d.State(); !st.Busy {
		t.Fatal("not busy while an Ask waits for its renewal")
	}
	if !kicked(d) {
		t.Fatal("the second Ask kicked nothing")
	}
	d.Begin()
	d.training.Lock()
	forced := d.training.forced
	d.training.Unlock()
	if !forced {
		t.Fatal("the renewal of the second Ask is not forced")
	}
	d.Done(errors.New("disk full"))
	if !closed(second) || d.State().Busy {
		t.Fatal("the second Ask is not answered by the Done of its renewal (or still busy)")
	}
}

// TestPoolBound: the pool keeps the most recent small payloads, never
// much more than Pool bytes.
func TestPoolBound(t *testing.T) {
	tu := tuning()
	tu.TrainAfter = 1 << 30 // (no training: only the pool)
	d := New(tu)
	enc := segment.Encoder{Uncompressed: true}
	for i := range 100 {
		d.Observe(frames(t, enc, uint64(i)*10, 10, 300)) // ~3 KiB each
		if st := d.State(); st.Bytes > tu.Pool+tu.Small {
			t.Fatalf("after %d frames the pool holds %d bytes (Pool %d)", (i+1)*10, st.Bytes, tu.Pool)
		}
	}
	if st := d.State(); st.Bytes < tu.Pool {
		t.Fatalf("the pool holds %d bytes, want at least %d", st.Bytes, tu.Pool)
	}
	// Once full, the pool turns over one frame in poolStride: its last
	// payload is one of the last poolStride observed.
	got := d.training.pool[len(d.training.pool)-1]
	newest := false
	for seq := uint64(1000 - poolStride); seq < 1000; seq++ {
		if string(got) == string(frames(t, enc, seq, 1, 300)[0].Raw()) {
			newest = true
		}
	}
	if !newest {
		t.Fatalf("the last payload in the pool is not one of the last %d frames observed", poolStride)
	}
	// Sampled, not every frame copied: of the next poolStride*10 frames,
	// 10 go in.
	before := d.training.pool[len(d.training.pool)-1]
	moved := 0
	for i := range poolStride * 10 {
		d.Observe(frames(t, enc, uint64(2000+i), 1, 300))
		if last := d.training.pool[len(d.training.pool)-1]; &last[0] != &before[0] {
			moved++
			before = last
		}
	}
	if moved != 10 {
		t.Fatalf("of %d frames after the pool filled, %d were sampled, want 10", poolStride*10, moved)
	}
}

// TestRenew: the first dictionary is small (its content a Share of what
// was written) and lets the pool go; once the process has written enough
// for one of twice the content, the pool refills and a larger one is
// trained (it pays on these repetitive events). Each
// dictionary is durable in the directory and in dicts; another Trainer
// of the store takes the newest instead of training its own.
func TestRenew(t *testing.T) {
	fsys, dir := vfs.NewMem(), "store"
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dicts := segment.NewDicts(fsys, dir)
	a := New(tuning())
	enc := segment.Encoder{Uncompressed: true}
	a.Observe(frames(t, enc, 0, 40, 300)) // ~12 KiB: the first is due
	if !kicked(a) {
		t.Fatal("the first is not due")
	}
	if err := a.Renew(fsys, dir, dicts); err != nil {
		t.Fatal(err)
	}
	first := a.Cur()
	if st := a.State(); first == nil || st.Collecting || st.Samples != 0 || first.Len() > 4<<10 {
		t.Fatalf("after the first training: a dictionary %v, state %+v; want one of about 2 KiB, the pool let go", first != nil, st)
	}
	a.Done(nil)
	a.Observe(frames(t, enc, 100, 100, 300)) // half way to one of 8 KiB
	if st := a.State(); !st.Collecting || kicked(a) {
		t.Fatalf("after %d bytes: state %+v; want the pool refilling, nothing due yet", st.Total, st)
	}
	a.Observe(frames(t, enc, 200, 120, 300))
	if !kicked(a) {
		t.Fatal("not due with the pool refilled for a larger dictionary")
	}
	if err := a.Renew(fsys, dir, dicts); err != nil {
		t.Fatal(err)
	}
	a.Done(nil)
	if st := a.State(); a.Cur() == nil || a.Cur().ID == first.ID || a.Cur().Len() <= first.Len() || st.Collecting || st.Samples != 0 || st.Declined != 0 {
		t.Fatalf("after the growth: state %+v; want a new, larger dictionary and the pool let go", st)
	}
	if ids, err := segment.ListDicts(fsys, dir); err != nil || len(ids) != 2 {
		t.Fatalf("dictionaries in the directory: %v, %v; want 2", ids, err)
	}
	if got, err := dicts.Get(a.Cur().ID); err != nil || got.ID != a.Cur().ID {
		t.Fatalf("dicts.Get(%d): %v, %v", a.Cur().ID, got, err)
	}

	b := New(tuning())
	b.Observe(frames(t, enc, 0, 40, 300))
	if err := b.Renew(fsys, dir, segment.NewDicts(fsys, dir)); err != nil {
		t.Fatal(err)
	}
	if ids, _ := segment.ListDicts(fsys, dir); len(ids) != 2 || b.Cur().ID != a.Cur().ID {
		t.Fatalf("dictionaries %v; b uses %d, a %d: want b to take a's", ids, b.Cur().ID, a.Cur().ID)
	}
	if st := b.State(); st.Collecting || st.Samples != 0 {
		t.Fatalf("b took another's dictionary and still collects: %+v", st)
	}

	c := New(tuning()) // a write open: takes the newest
	if err := c.Load(fsys, dir, segment.NewDicts(fsys, dir)); err != nil || c.Cur() == nil || c.Cur().ID != a.Cur().ID {
		t.Fatalf("Load: %v, want a's dictionary", err)
	}
}

// TestBudget: a small frame is compressed with the dictionary within the
// budget, stored as it is beyond it; before there is a dictionary the
// frames charge what one would take, and without spare budget none is
// due.
func TestBudget(t *testing.T) {
	fsys, dir := vfs.NewMem(), "store"
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(tuning())
	plain := segment.Encoder{Uncompressed: true}
	d.Observe(frames(t, plain, 0, 40, 300))
	if err := d.Renew(fsys, dir, segment.NewDicts(fsys, dir)); err != nil {
		t.Fatal(err)
	}
	withDict := segment.Encoder{Dict: d.Cur()}
	small := func(seq uint64) *segment.Encoded {
		e, err := d.EncodeSmall(withDict, "s", testgen.Events(seq, 1, 300))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if e := small(1000); e.Dict() != d.Cur().ID {
		t.Fatalf("within the budget: frame of dictionary %d, want %d", e.Dict(), d.Cur().ID)
	}
	d.SetBudget(0, 0)
	if e := small(1001); e.Dict() != 0 {
		t.Fatalf("beyond the budget: frame of dictionary %d, want none", e.Dict())
	}

	// Before a dictionary: 10 µs a frame drains a 100 µs burst, and
	// then nothing is due however much is written.
	n := New(tuning())
	n.SetBudget(0, 100*time.Microsecond)
	for i := range 20 {
		if _, err := n.EncodeSmall(plain, "s", testgen.Events(uint64(i), 1, 300)); err != nil {
			t.Fatal(err)
		}
	}
	n.Observe(frames(t, plain, 0, 100, 300))
	if kicked(n) {
		t.Fatal("a dictionary due without spare budget")
	}
	// While it waits, Observe looks at the clock and the budget once
	// in dueStride frames, not at every frame.
	looks := n.training.looks
	for i := range 4 * dueStride {
		n.Observe(frames(t, plain, uint64(1000+i), 1, 300))
	}
	if got := n.training.looks - looks; got > 4 {
		t.Fatalf("%d looks at the budget in %d frames, want at most 4", got, 4*dueStride)
	}
	n.SetBudget(1e6, time.Second)
	// (A due training that waits looks at the budget once in dueStride
	// frames.)
	for i := range dueStride {
		n.Observe(frames(t, plain, uint64(100+i), 1, 300))
	}
	if !kicked(n) {
		t.Fatalf("not due %d frames after the budget is back", dueStride)
	}
}

// noisy returns testgen's event of seq, of about 500 bytes, with size
// random lowercase letters added: text the dictionary does not know,
// which compresses far worse with it.
func noisy(r *rand.Rand, seq uint64, size int) event.Event {
	b := make([]byte, size)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	e := testgen.Event(seq, 500)
	e.Data = json.RawMessage(fmt.Sprintf(`{"a":%s,"b":%q}`, e.Data, b))
	return e
}

// TestDrift: once the dictionary is the last, frames that compress
// Drift worse with it than its first window did (after RetrainMin
// bytes) make the Trainer collect samples again; frames that compress as
// well do not.
func TestDrift(t *testing.T) {
	fsys, dir := vfs.NewMem(), "store"
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(tuning())
	plain := segment.Encoder{Uncompressed: true}
	d.Observe(frames(t, plain, 0, 120, 300)) // the pool full
	if err := d.Renew(fsys, dir, segment.NewDicts(fsys, dir)); err != nil {
		t.Fatal(err)
	}
	if d.State().Collecting {
		t.Fatal("still collecting after the last training")
	}
	enc := segment.Encoder{Dict: d.Cur(), MinCompress: -1}
	d.Observe(frames(t, enc, 1000, 200, 1500)) // base, then as good
	if d.State().Collecting {
		t.Fatal("collecting again while frames compress as well as the first window")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		e, err := enc.Events("s", uint64(2000+i), []event.Event{noisy(r, uint64(2000+i), 3500)})
		if err != nil {
			t.Fatal(err)
		}
		if e.Dict() == 0 {
			t.Fatalf("a noisy frame not compressed with the dictionary: codec %d, %d of %d bytes", e.Codec(), e.StoredLen(), e.RawLen())
		}
		d.Observe([]*segment.Encoded{e})
	}
	if !d.State().Collecting {
		t.Fatal("not collecting after frames compress far worse with the dictionary")
	}
}

// TestRenewDeclines: a dictionary that would not save its own file's
// bytes (frames of random text, which it cannot match) is trained and
// not kept: no file, no current dictionary, the pool let go, and no
// training again until the process has written twice as much.
func TestRenewDeclines(t *testing.T) {
	fsys, dir := vfs.NewMem(), "store"
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dicts := segment.NewDicts(fsys, dir)
	d := New(tuning())
	enc := segment.Encoder{Uncompressed: true}
	random := func(first uint64, n int) []*segment.Encoded {
		out := make([]*segment.Encoded, n)
		for i := range out {
			b := make([]byte, 300)
			crand.Read(b)
			data, _ := json.Marshal(map[string]string{"x": base64.StdEncoding.EncodeToString(b)})
			e, err := enc.Events("s", first+uint64(i), []event.Event{{Seq: first + uint64(i), Type: "user/message", Data: data}})
			if err != nil {
				t.Fatal(err)
			}
			out[i] = e
		}
		return out
	}
	d.Observe(random(0, 40))
	if !kicked(d) {
		t.Fatal("the first is not due")
	}
	if err := d.Renew(fsys, dir, dicts); err != nil {
		t.Fatal(err)
	}
	d.Done(nil)
	st := d.State()
	if ids, _ := segment.ListDicts(fsys, dir); d.Cur() != nil || len(ids) != 0 || st.Declined != 1 || st.Collecting {
		t.Fatalf("a dictionary that does not pay: current %v, files %v, state %+v; want none kept, declined, the pool let go", d.Cur() != nil, ids, st)
	}
	d.Observe(random(100, 10))
	if kicked(d) || d.State().Collecting {
		t.Fatalf("due again at %d bytes: %+v", d.State().Total, d.State())
	}
	d.Observe(random(200, 30)) // twice what it had written: the pool refills
	if kicked(d) || !d.State().Collecting {
		t.Fatalf("at %d bytes: %+v; want the pool refilling, nothing due yet", d.State().Total, d.State())
	}
	d.Observe(random(300, 30))
	if !kicked(d) {
		t.Fatalf("not due again with a refilled pool: %+v", d.State())
	}
}
