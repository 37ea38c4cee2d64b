package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// dirBytes sums the sizes of the files under dir, as du --apparent-size
// does.
func dirBytes(t *testing.T, dir string) (total int64, byName map[string]int64) {
	t.Helper()
	byName = map[string]int64{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		byName[rel] = fi.Size()
		total += fi.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total, byName
}

// statsDisk runs stats --json on dir and returns its disk figures.
func statsDisk(t *testing.T, dir string) statsJSON {
	t.Helper()
	stdout, stderr, code := cliSplit(t, "stats", "--json", "--dir", dir)
	if code != 0 {
		t.Fatalf("stats --json: exit %d: %s", code, stderr)
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(stdout), &st); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, stdout)
	}
	return st
}

// checkDiskAddsUp: the parts of stats' disk add up to its total, which is
// the directory's bytes, and each part is what the files of its kind take.
func checkDiskAddsUp(t *testing.T, when, dir string, st statsJSON) {
	t.Helper()
	d := st.Disk
	total, files := dirBytes(t, dir)
	if sum := d.Segments + d.SegmentRoom + d.Index + d.Dictionaries + d.Coordination + d.Search + d.Other; sum != d.Total {
		t.Errorf("%s: the parts %+v add up to %d, not the total %d", when, d, sum, d.Total)
	}
	if d.Total != total {
		t.Errorf("%s: disk total %d, the directory's files take %d: %v", when, d.Total, total, files)
	}
	var segs, dicts, coord int64
	var ndicts int
	for name, n := range files {
		switch _, isDict := segment.ParseDictName(name); {
		case strings.HasSuffix(name, ".seg"):
			segs += n
		case isDict:
			dicts += n
			ndicts++
		case name == "LOCK" || name == "locks" || name == "shm" || strings.HasPrefix(name, "lease-"):
			coord += n
		}
	}
	if d.Segments+d.SegmentRoom != segs || d.Dictionaries != dicts || d.DictionaryFiles != ndicts ||
		d.Index != files["index.db"] || d.Coordination != coord {
		t.Errorf("%s: disk %+v; the files: segments %d, dictionaries %d (%d files), index %d, coordination %d",
			when, d, segs, dicts, ndicts, files["index.db"], coord)
	}
	// The frames of the sessions are in the segments' used part.
	if d.Segments < st.Bytes || d.Segments <= 0 {
		t.Errorf("%s: segments up to their last frame take %d, the sessions' frames %d", when, d.Segments, st.Bytes)
	}
}

// TestStatsDiskAddsUp: stats --json's disk figures add up to the bytes of
// the store's directory, by kind (segments and their preallocated room,
// index, dictionaries, coordination files with a write lease's holder
// record), with a host writing the store (its active segment preallocated,
// a dictionary made) and after it closed.
func TestStatsDiskAddsUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// Small frames (a flush each) until the host makes a dictionary.
	seq := uint64(0)
	for deadline := time.Now().Add(20 * time.Second); ; {
		if ids, _ := segment.ListDicts(nil, dir); len(ids) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no dictionary made")
		}
		if err := h.Append(ctx, testgen.Events(seq, 2, 300)...); err != nil {
			t.Fatal(err)
		}
		seq += 2
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Append(ctx, testgen.Events(seq, 2, 300)...); err != nil { // with the dictionary
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	live := statsDisk(t, dir)
	checkDiskAddsUp(t, "live", dir, live)
	if live.Disk.SegmentRoom <= 0 || live.Disk.DictionaryFiles < 1 || live.Disk.Coordination <= 0 {
		t.Errorf("live: disk %+v: want preallocated room, a dictionary, the coordination files", live.Disk)
	}
	if _, files := dirBytes(t, dir); !hasPrefix(files, "lease-") {
		t.Errorf("live: no lease-* holder record beside the segments: %v", files)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	closed := statsDisk(t, dir)
	checkDiskAddsUp(t, "closed", dir, closed)
	if closed.Bytes != live.Bytes || closed.Disk.Dictionaries != live.Disk.Dictionaries {
		t.Errorf("closed: %+v, live: %+v: the frames and dictionaries changed", closed, live)
	}
	// The text output shows the same total.
	out, code := cli(t, "stats", "--dir", dir)
	if want := "disk      " + itoa(closed.Disk.Total); code != 0 || !strings.Contains(out, want) {
		t.Errorf("stats: exit %d, want %q in\n%s", code, want, out)
	}
}

func hasPrefix(files map[string]int64, p string) bool {
	for name := range files {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
