package bufpool

import "testing"

func TestPool(t *testing.T) {
	p := Pool{Max: 1 << 10}
	b := p.Get(100)
	if len(b) != 0 || cap(b) < 100 {
		t.Fatalf("Get(100): len %d cap %d", len(b), cap(b))
	}
	b = append(b, "abc"...)
	p.Put(b)
	// A kept buffer comes back empty, whatever was in it; one too small
	// for the size asked is not handed out.
	if c := p.Get(2000); cap(c) < 2000 || len(c) != 0 {
		t.Fatalf("Get(2000): len %d cap %d", len(c), cap(c))
	}
	big := make([]byte, 0, 4<<10)
	p.Put(big) // over Max: dropped
	for range 10 {
		if c := p.Get(10); cap(c) > p.Max {
			t.Fatalf("Get(10) handed out a buffer of %d bytes, over Max %d", cap(c), p.Max)
		}
	}
	var zero Pool
	zero.Put(make([]byte, 10))
	if c := zero.Get(5); cap(c) < 5 || len(c) != 0 {
		t.Fatalf("zero Pool Get(5): len %d cap %d", len(c), cap(c))
	}
}

// TestPoolAllocatesNothing: a buffer handed out and kept again costs no
// allocation once the pool is warm.
func TestPoolAllocatesNothing(t *testing.T) {
	p := Pool{Max: 1 << 10}
	p.Put(p.Get(100))
	// (A collection may empty the pool meanwhile: half an allocation
	// per round allows for it, and not for one per Put.)
	if n := testing.AllocsPerRun(100, func() { p.Put(p.Get(100)) }); n >= 0.5 {
		t.Fatalf("Get and Put: %v allocations per round, want none", n)
	}
}
