package segment

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/vfs"
)

func TestNames(t *testing.T) {
	if got := Name(0x1f); got != "000000000000001f.seg" {
		t.Errorf("Name = %q", got)
	}
	for _, bad := range []string{"1f.seg", "000000000000001F.seg", "000000000000001f.seg.tmp", "x000000000000001.seg"} {
		if _, ok := ParseName(bad); ok {
			t.Errorf("ParseName(%q) accepted", bad)
		}
	}
	if id, ok := ParseName(Name(1 << 60)); !ok || id != 1<<60 {
		t.Errorf("round trip: %d %v", id, ok)
	}
}

// Concurrent appends and syncs across many rolls: every frame lands once,
// in a consecutive run of segments of which all but the last are sealed,
// and each session's seqs are contiguous in segment order.
func TestRollerConcurrent(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll("/db", 0o755)
	o := WriterOptions{Size: 8 << 10, BufferSize: 2 << 10}
	first, err := Create(mem, filepath.Join("/db", Name(1)), 1, o)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRoller(mem, "/db", first, o)
	const sessions, per = 6, 60
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Go(func() {
			key := fmt.Sprintf("s%d", s)
			for i := range per {
				if _, _, err := appendTo(r, key, uint64(i), makeEvents(uint64(i), 1, 200)); err != nil {
					errs <- err
					return
				}
				if i%7 == 0 {
					if err := r.Sync(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	last := r.Active().Header().ID
	r.Close()
	ids, err := List(mem, "/db")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) < 5 || ids[0] != 1 || ids[len(ids)-1] != last {
		t.Fatalf("segments %v, active %d: expected several rolls", ids, last)
	}
	next := map[string]uint64{}
	for i, id := range ids {
		if id != uint64(i+1) {
			t.Fatalf("segment IDs %v not consecutive", ids)
		}
		data := readAll(t, mem, filepath.Join("/db", Name(id)))
		res, err := Scan(Name(id), data, ScanOptions{}, func(fi *FrameInfo) error {
			if fi.Kind != KindEvents {
				return nil
			}
			k := string(fi.Key)
			if fi.FirstSeq != next[k] {
				return fmt.Errorf("session %s: frame at seq %d, want %d", k, fi.FirstSeq, next[k])
			}
			next[k] += uint64(fi.Count)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if sealed := id != last; res.Sealed != sealed || res.Torn {
			t.Errorf("segment %d: %+v, want sealed=%v", id, res, sealed)
		}
	}
	keys := make([]string, 0, len(next))
	for k, n := range next {
		keys = append(keys, k)
		if n != per {
			t.Errorf("session %s has %d events, want %d", k, n, per)
		}
	}
	if slices.Sort(keys); len(keys) != sessions {
		t.Errorf("sessions %v", keys)
	}
}

// PrepareNext creates the next segment ahead; the roll uses it, and
// concurrent prepares and rolls never collide on a file name.
func TestRollerPrepareNext(t *testing.T) {
	mem := vfs.NewMem()
	mem.MkdirAll("/db", 0o755)
	o := WriterOptions{Size: 8 << 10}
	first, err := Create(mem, filepath.Join("/db", Name(1)), 1, o)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRoller(mem, "/db", first, o)
	defer r.Close()
	if err := r.PrepareNext(); err != nil || !r.Prepared() {
		t.Fatalf("PrepareNext: %v, prepared %v", err, r.Prepared())
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			if err := r.PrepareNext(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := range 200 {
		if _, _, err := appendTo(r, "s", uint64(i), makeEvents(uint64(i), 1, 300)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	ids, _ := List(mem, "/db")
	if len(ids) < 5 {
		t.Fatalf("segments %v", ids)
	}
}

// appendTo encodes evs as one frame of key and appends it through r.
func appendTo(r *Roller, key string, firstSeq uint64, evs []event.Event) (uint64, Location, error) {
	e, err := r.Active().Encoder().Events(key, firstSeq, evs)
	if err != nil {
		return 0, Location{}, err
	}
	return r.AppendEncoded(e)
}
