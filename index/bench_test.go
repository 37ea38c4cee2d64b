package index

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// BenchmarkApply: one checkpoint of 8192 one-event frames interleaved
// across 64 sessions, as group-committed flushes of many sessions leave
// them; the index grows by 8192 frames per op.
func BenchmarkApply(b *testing.B) {
	x, err := Open(filepath.Join(b.TempDir(), "index"), &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	const sessions, frames = 64, 8192
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("session-%04d", i)
	}
	var next [sessions]uint64
	off := int64(64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		u := &Update{Frames: make([]SessionFrame, frames)}
		for j := range u.Frames {
			s := j % sessions
			u.Frames[j] = SessionFrame{ID: ids[s], Frame: Frame{FirstSeq: next[s], Count: 1, Segment: 1, Offset: off, Size: 344}}
			next[s]++
			off += 344
		}
		u.Checkpoint = Checkpoint{Segment: 1, Offset: off}
		if err := x.Apply(u); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
}

// BenchmarkApplyFirst: the first checkpoint after 64 sessions were
// created (one frame each, all in one leaf page), holding 32768 one-event
// frames interleaved across them, as the first checkpoint of a busy store
// with several writing processes does: each op is a fresh index.
func BenchmarkApplyFirst(b *testing.B) {
	const sessions, frames = 64, 32768
	ids := make([]string, sessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("p%d-s%d", i/16, i%16)
	}
	dir := b.TempDir()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		x, err := Open(filepath.Join(dir, fmt.Sprintf("index-%d", i)), &Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		off := int64(64)
		u := &Update{}
		for s := range sessions {
			u.Frames = append(u.Frames, SessionFrame{ID: ids[s], Frame: Frame{FirstSeq: 0, Count: 1, Segment: 1, Offset: off, Size: 344}})
			off += 344
		}
		u.Checkpoint = Checkpoint{Segment: 1, Offset: off}
		if err := x.Apply(u); err != nil {
			b.Fatal(err)
		}
		u = &Update{Frames: make([]SessionFrame, frames)}
		for j := range u.Frames {
			s := j % sessions
			u.Frames[j] = SessionFrame{ID: ids[s], Frame: Frame{FirstSeq: uint64(1 + j/sessions), Count: 1, Segment: 1, Offset: off, Size: 344}}
			off += 344
		}
		u.Checkpoint = Checkpoint{Segment: 1, Offset: off}
		b.StartTimer()
		if err := x.Apply(u); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		x.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*frames), "ns/frame")
}

// bigIndexDir holds bigIndex's file; TestMain removes it.
var bigIndexDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if bigIndexDir != "" {
		os.RemoveAll(bigIndexDir)
	}
	os.Exit(code)
}

// bigIndex builds (once) an index of 100k sessions with 10 frames each and
// returns its path.
var bigIndex = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "index-bench")
	if err != nil {
		return "", err
	}
	bigIndexDir = dir
	path := filepath.Join(dir, "index.db")
	x, err := Open(path, &Options{NoSync: true})
	if err != nil {
		return "", err
	}
	defer x.Close()
	const sessions, perSession = 100_000, 10
	off := int64(64)
	u := &Update{}
	for i := range sessions {
		id := fmt.Sprintf("agent-%02d/session-%08d", i%37, i)
		for j := range perSession {
			u.Frames = append(u.Frames, SessionFrame{ID: id, Frame: Frame{FirstSeq: uint64(j * 4), Count: 4, Segment: uint64(1 + i/1000), Offset: off, Size: 1200}})
			off += 1200
		}
		u.Sessions = append(u.Sessions, Session{ID: id, Header: fmt.Appendf(nil, `{"v":3,"id":%q,"created":1767225600000,"meta":{"model":"m","cwd":"/home/u/p"}}`, id),
			UID: uint64(i + 1), Events: perSession * 4, Size: perSession * 1200})
		if len(u.Frames) >= 8192 || i == sessions-1 {
			u.Checkpoint = Checkpoint{Segment: uint64(1 + i/1000), Offset: off}
			if err := x.Apply(u); err != nil {
				return "", err
			}
			u = &Update{}
		}
	}
	return path, nil
})

// BenchmarkVerify: Verify of an index of 100k sessions and 1M frames;
// MB/s is of the index file.
func BenchmarkVerify(b *testing.B) {
	path, err := bigIndex()
	if err != nil {
		b.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		b.Run(fmt.Sprintf("readonly=%v", ro), func(b *testing.B) {
			x, err := Open(path, &Options{ReadOnly: ro, NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			fi, err := os.Stat(path)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(fi.Size())
			for b.Loop() {
				if err := x.Verify(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOpen: Open (which checks the whole file) and Close of the index
// of BenchmarkVerify.
func BenchmarkOpen(b *testing.B) {
	path, err := bigIndex()
	if err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		b.Run(fmt.Sprintf("readonly=%v", ro), func(b *testing.B) {
			b.SetBytes(fi.Size())
			for b.Loop() {
				x, err := Open(path, &Options{ReadOnly: ro, NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				x.Close()
			}
		})
	}
}

// BenchmarkCheckFile: the structural check alone (the part of Open that
// this package adds before bbolt reads the file).
func BenchmarkCheckFile(b *testing.B) {
	path, err := bigIndex()
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	b.SetBytes(fi.Size())
	for b.Loop() {
		if err := checkLocked(f, path, nil); err != nil {
			b.Fatal(err)
		}
	}
}
