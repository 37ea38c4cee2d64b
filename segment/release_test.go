package segment

import (
	"bytes"
	"testing"
)

// pooled empties payloadBufs and reports whether it held a buffer whose
// array is that of b.
func pooled(b []byte) bool {
	found := false
	for range 1000 {
		v := payloadBufs.Get(1)
		if cap(v) <= 1 {
			return found // (a new one: the pool is empty)
		}
		if cap(b) > 0 && &v[:1][0] == &b[:1][0] {
			found = true
		}
	}
	return found
}

// TestReleaseReturnsEachBufferOnce: Release gives back what the frame
// owns, once: a payload stored as is (stored is raw) goes into the pool
// once, not twice (two later frames would share one buffer), and a frame
// refitted without its dictionary (WithoutDict) owns its new stored
// payload only, never the raw payload it shares with the frame it was
// made from, which stays intact (and releases it).
func TestReleaseReturnsEachBufferOnce(t *testing.T) {
	evs := makeEvents(0, 20, 300)
	pooled(nil)
	e, err := Encoder{Uncompressed: true}.Events("k", 0, evs)
	if err != nil {
		t.Fatal(err)
	}
	e.Release()
	a, b := payloadBufs.Get(1), payloadBufs.Get(1)
	if &a[:1][0] == &b[:1][0] {
		t.Fatal("a payload stored as is went into the pool twice: two frames share its buffer")
	}

	d := testDict(t, 0x5eed)
	e, err = Encoder{Dict: d}.Events("k", 0, evs)
	if err != nil {
		t.Fatal(err)
	}
	if e.Dict() == 0 {
		t.Fatal("not compressed with the dictionary")
	}
	raw, frame := bytes.Clone(e.Raw()), MarshalFrame(e)
	pooled(nil)
	w := e.Fit(RewriteVersion)
	if w.Dict() != 0 || w == e {
		t.Fatalf("Fit: dictionary %d", w.Dict())
	}
	w.Release()
	if pooled(e.Raw()) {
		t.Fatal("releasing the refitted frame gave the original's raw payload to the pool")
	}
	for i := range 20 { // (whatever the pool holds is handed out and written)
		x, err := Encoder{}.Events("k", 0, makeEvents(uint64(100+i), 20, 300))
		if err != nil {
			t.Fatal(err)
		}
		x.Release()
	}
	if !bytes.Equal(e.Raw(), raw) || !bytes.Equal(MarshalFrame(e), frame) {
		t.Fatal("the original frame changed after its refitted copy was released")
	}
	e.Release()
	if e.Raw() != nil || e.StoredLen() != 0 {
		t.Fatal("a released frame still holds its payloads")
	}
}
