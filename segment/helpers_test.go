package segment

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/vfs"
)

// words is a vocabulary for text that compresses like prose, not like a
// repeated string.
var words = strings.Fields(`the a of to and in is it that for on with as was at by this be from or
have an are not but which they you we his her can all there their will one would what so if out up
about into when who them more some could time no like other than then its our only new just two also
tool call result file read write error step turn model user message assistant function return value
session event log index segment frame flush sync append offset batch token stream chunk delta text
reasoning plan mode header request context provider config path line code test build run go json
struct field type string number array object null true false key map list set get put delete open
close lock lease handle writer reader buffer cache page disk memory thread core process signal`)

// makeEvents returns n events from seq first, each with a JSON object of
// about size bytes of word-salad text, exercising every optional field.
// The text is a deterministic function of the seq.
func makeEvents(first uint64, n, size int) []event.Event {
	evs := make([]event.Event, n)
	for i := range evs {
		seq := first + uint64(i)
		r := rand.New(rand.NewPCG(seq, 99))
		var text strings.Builder
		for text.Len() < size-60 {
			text.WriteString(words[r.IntN(len(words))])
			text.WriteByte(' ')
		}
		e := event.Event{
			Seq:  seq,
			Type: []string{"turn/start", "assistant/message", "tool/result", "step/end"}[seq%4],
			Time: 1_700_000_000_000 + int64(seq)*7 - int64(seq%3)*11, // not monotonic
			Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"text":%q}`, seq, text.String())),
		}
		if seq%5 == 1 {
			e.Ignorable = true
		}
		if seq%4 == 2 && seq > 0 {
			e.SourceEventSeqs = []uint64{seq - 1}
			e.SurfaceOp = json.RawMessage(`"append"`)
		}
		evs[i] = e
	}
	return evs
}

// smallOpts are writer options for tests: small segments, tiny buffers so
// that spills happen.
func smallOpts() WriterOptions {
	return WriterOptions{Size: 64 << 10, BufferSize: 4 << 10}
}

func mustCreate(t testing.TB, fsys vfs.FS, path string, o WriterOptions) *Writer {
	t.Helper()
	w, err := Create(fsys, path, 1, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func mustAppend(t testing.TB, w *Writer, key string, evs []event.Event) Location {
	t.Helper()
	loc, err := w.Append(key, evs[0].Seq, evs)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustSync(t testing.TB, w *Writer) {
	t.Helper()
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, fsys vfs.FS, path string) []byte {
	t.Helper()
	b, err := vfs.ReadFile(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// frameOffsets returns the offsets of every valid frame Scan finds.
func frameOffsets(t testing.TB, data []byte) []int64 {
	t.Helper()
	var offs []int64
	if _, err := Scan("t", data, ScanOptions{}, func(fi *FrameInfo) error {
		offs = append(offs, fi.Offset)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return offs
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5e61)) }

func xxhashSum(b []byte) uint64 { return xxhash.Sum64(b) }

// equalEvents is a fast exact comparison (cmp walks []byte element by
// element through reflection, which dominates the crash loops).
func equalEvents(a, b []event.Event) bool {
	return slices.EqualFunc(a, b, func(x, y event.Event) bool {
		return x.Seq == y.Seq && x.Type == y.Type && x.Time == y.Time && x.Ignorable == y.Ignorable &&
			bytes.Equal(x.Data, y.Data) && bytes.Equal(x.SurfaceOp, y.SurfaceOp) &&
			slices.Equal(x.SourceEventSeqs, y.SourceEventSeqs) &&
			(x.Data == nil) == (y.Data == nil) && (x.SurfaceOp == nil) == (y.SurfaceOp == nil) &&
			(x.SourceEventSeqs == nil) == (y.SourceEventSeqs == nil)
	})
}
