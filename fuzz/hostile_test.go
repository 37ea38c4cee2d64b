package fuzz

import (
	"context"
	"encoding/binary"
	"errors"
	"path"
	"slices"
	"sync"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// A small valid store, built once: three sessions over several segments.
var (
	baseOnce  sync.Once
	baseFiles map[string][]byte
	baseLogs  map[string][]event.Event
)

func baseStore(t testing.TB) (map[string][]byte, map[string][]event.Event) {
	baseOnce.Do(func() {
		ctx := context.Background()
		mem := vfs.NewMem()
		db, err := enginetest.OpenStore(t, "/db", &engine.Options{FS: mem, SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true})
		if err != nil {
			panic(err)
		}
		baseLogs = map[string][]event.Event{}
		for i, id := range []string{"a", "b", "c"} {
			h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
			if err != nil {
				panic(err)
			}
			evs := testgen.Events(0, 20+10*i, 150)
			for j := 0; j < len(evs); j += 7 {
				if err := h.Append(ctx, evs[j:min(j+7, len(evs))]...); err != nil {
					panic(err)
				}
				if err := h.Flush(ctx); err != nil {
					panic(err)
				}
			}
			baseLogs[id] = evs
			h.Close()
		}
		db.Close()
		baseFiles = map[string][]byte{}
		names, _ := mem.List("/db")
		for _, n := range names {
			if b, err := vfs.ReadFile(mem, "/db/"+n); err == nil && n != "LOCK" {
				baseFiles[n] = b
			}
		}
	})
	return baseFiles, baseLogs
}

// damage applies the mutations script describes to a copy of files.
func damage(files map[string][]byte, script []byte) map[string][]byte {
	out := map[string][]byte{}
	var names []string
	for n, b := range files {
		out[n] = slices.Clone(b)
		names = append(names, n)
	}
	slices.Sort(names)
	for i := 0; i+4 <= len(script) && i < 64; i += 4 {
		name := names[int(script[i+1])%len(names)]
		b := out[name]
		if len(b) == 0 {
			continue
		}
		off := int(binary.LittleEndian.Uint16(script[i+2:])) % len(b)
		switch script[i] % 5 {
		case 0: // bit flip
			b[off] ^= 1 << (script[i+3] % 8)
		case 1: // truncate
			out[name] = b[:off]
		case 2: // zero a range
			clear(b[off:min(off+int(script[i+3])*8, len(b))])
		case 3: // swap two files' contents
			other := names[int(script[i+3])%len(names)]
			out[name], out[other] = out[other], out[name]
		case 4: // garbage range
			for j := off; j < min(off+int(script[i+3]), len(b)); j++ {
				b[j] = byte(j*131) ^ script[i+3]
			}
		}
	}
	return out
}

func loadFS(t *testing.T, files map[string][]byte) *vfs.MemFS {
	mem := vfs.NewMem()
	mem.MkdirAll("/db", 0o755)
	for n, b := range files {
		f, err := mem.Create(path.Join("/db", n))
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(b, 0)
		f.Sync()
		f.Close()
	}
	mem.SyncDir("/db")
	mem.SyncDir("/")
	return mem
}

// typed reports whether err is one of the documented kinds a damaged
// store may produce.
func typed(err error) bool {
	return errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrFormat) ||
		errors.Is(err, store.ErrUnsupportedEvent) || errors.Is(err, store.ErrSeed)
}

// hostileOutcomes counts how damaged stores ended, for the random test's log.
var hostileOutcomes = map[string]int{}

func checkHostile(t *testing.T, script []byte) {
	files, logs := baseStore(t)
	mem := loadFS(t, damage(files, script))
	ctx := context.Background()
	db, err := enginetest.OpenUnchecked("a store the test damaged at random: it judges the open and every read itself (typed errors, nothing cut silently)", "/db", &engine.Options{FS: mem, SegmentSize: 8 << 10, NoPreallocate: true})
	if err != nil {
		if !typed(err) {
			t.Fatalf("Open of a damaged store: untyped error %v", err)
		}
		hostileOutcomes["open refused"]++
		return
	}
	defer db.Close()
	snaps, err := db.List(ctx)
	if err != nil {
		if !typed(err) {
			t.Fatalf("List: untyped error %v", err)
		}
		return
	}
	for _, snap := range snaps {
		id := snap.Header.ID
		want, ok := logs[id]
		if !ok {
			t.Fatalf("a session %q that was never written appeared", id)
		}
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			if !typed(err) {
				t.Fatalf("open %s: untyped error %v", id, err)
			}
			continue
		}
		got, err := h.Read(ctx, 0, -1)
		if err != nil {
			if !typed(err) {
				t.Fatalf("read %s: untyped error %v", id, err)
			}
			hostileOutcomes["read refused"]++
			continue
		}
		if len(got) == len(want) {
			hostileOutcomes["session intact"]++
		} else {
			hostileOutcomes["session cut to a prefix"]++
		}
		if len(got) > len(want) {
			t.Fatalf("session %s: %d events, only %d were written", id, len(got), len(want))
		}
		for i := range got {
			if !sameEvent(got[i], want[i]) {
				t.Fatalf("session %s: event %d returned damaged", id, i)
			}
		}
	}
}

// FuzzOpenDamaged opens stores damaged by bit flips, truncations, zeroed
// or garbage ranges and swapped files: Open and reads return a typed
// error or a consistent store, never panic, and never return a damaged
// event.
func FuzzOpenDamaged(f *testing.F) {
	f.Add([]byte{0, 0, 100, 3})
	f.Add([]byte{1, 1, 200, 0})
	f.Add([]byte{2, 2, 50, 9, 0, 1, 7, 1})
	f.Add([]byte{3, 0, 0, 1})
	f.Add([]byte{4, 1, 90, 40})
	f.Fuzz(func(t *testing.T, script []byte) { checkHostile(t, script) })
}

// TestOpenDamagedRandom runs random damage scripts as a plain test: 300
// (5000 with SEGLOG_LONG=1).
func TestOpenDamagedRandom(t *testing.T) {
	for seed := range testlong.Pick(300, 300, 5000) {
		script := make([]byte, 4*(1+seed%4))
		x := uint32(seed*2654435761 + 1)
		for i := range script {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			script[i] = byte(x)
		}
		checkHostile(t, script)
	}
	t.Logf("outcomes: %v", hostileOutcomes)
}

// With its index (the default on the OS), a cleanly closed store knows how
// far every segment was durable: damage to any segment is then a typed
// error or harmless, and never silently cuts a session short. 150 damage
// scripts (2000 with SEGLOG_LONG=1).
func TestOpenDamagedIndexed(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	db, err := enginetest.OpenStore(t, src, &engine.Options{SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true})
	if err != nil {
		t.Fatal(err)
	}
	logs := map[string][]event.Event{}
	for i, id := range []string{"a", "b", "c"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		evs := testgen.Events(0, 20+10*i, 150)
		for j := 0; j < len(evs); j += 7 {
			if err := h.Append(ctx, evs[j:min(j+7, len(evs))]...); err != nil {
				t.Fatal(err)
			}
		}
		logs[id] = evs
		h.Close()
	}
	db.Close()
	segs := map[string][]byte{}
	names, _ := vfs.Default.List(src)
	for _, n := range names {
		if path.Ext(n) == ".seg" {
			b, err := vfs.ReadFile(vfs.Default, path.Join(src, n))
			if err != nil {
				t.Fatal(err)
			}
			segs[n] = b
		}
	}
	index, err := vfs.ReadFile(vfs.Default, path.Join(src, "index.db"))
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for seed := range testlong.Pick(150, 150, 2000) {
		script := make([]byte, 4*(1+seed%3))
		x := uint32(seed*2246822519 + 7)
		for i := range script {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			script[i] = byte(x)
		}
		dir := t.TempDir()
		for n, b := range damage(segs, script) {
			writeFile(t, path.Join(dir, n), b)
		}
		writeFile(t, path.Join(dir, "index.db"), index)
		db, err := enginetest.OpenUnchecked("a store the test damaged at random: it judges the open and every read itself (typed errors, nothing cut silently)", dir, &engine.Options{SegmentSize: 8 << 10, NoPreallocate: true})
		if err != nil {
			if !typed(err) {
				t.Fatalf("seed %d: Open: untyped error %v", seed, err)
			}
			outcomes["open refused"]++
			continue
		}
		for id, want := range logs {
			h, err := db.Open(ctx, id, store.Read)
			var got []event.Event
			if err == nil {
				got, err = h.Read(ctx, 0, -1)
			}
			if err != nil {
				if !typed(err) {
					t.Fatalf("seed %d: session %s: untyped error %v", seed, id, err)
				}
				outcomes["read refused"]++
				continue
			}
			if len(got) != len(want) {
				t.Fatalf("seed %d: session %s silently cut from %d to %d events", seed, id, len(want), len(got))
			}
			for i := range got {
				if !sameEvent(got[i], want[i]) {
					t.Fatalf("seed %d: session %s event %d returned damaged", seed, id, i)
				}
			}
			outcomes["session intact"]++
		}
		db.Close()
	}
	t.Logf("outcomes: %v", outcomes)
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	f, err := vfs.Default.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
}
