package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

func TestEncodeID(t *testing.T) {
	for in, want := range map[string]string{
		"..": "~002E~002E", ".": "~002E", "a/b": "a~002Fb", "/etc/passwd": "~002Fetc~002Fpasswd",
		"\x00": "~0000", "plain-ID_1.2": "plain-ID_1.2", "a~b": "a~007Eb", "\U0001F600": "~D83D~DE00",
	} {
		if got, err := EncodeID(in); err != nil || got != want {
			t.Errorf("EncodeID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := EncodeID(""); err == nil {
		t.Error("empty id accepted")
	}
}

func TestProjectDir(t *testing.T) {
	for in, want := range map[string]string{
		"/Users/qyj/work/deepseek-harness": "--Users-qyj-work-deepseek-harness--",
		`C:\work\agent`:                    "--C-work-agent--",
		"/开发/~agent":                       "--~5F00~53D1-~007Eagent--",
		"/":                                "--root--",
		"":                                 "_no-cwd",
	} {
		if got := ProjectDir(in); got != want {
			t.Errorf("ProjectDir(%q) = %q, want %q", in, got, want)
		}
	}
	if ProjectDir("/a/b-c") != ProjectDir("/a-b/c") {
		t.Error("the lossy mapping should merge /a/b-c and /a-b/c")
	}
	if got := ProjectDir("/" + strings.Repeat("x", 1000)); len(got) != 255 {
		t.Errorf("long cwd gives %d characters, want 255", len(got))
	}
}

func TestHeaderLineKeyOrder(t *testing.T) {
	h := store.Header{Version: 3, ID: "s", CreatedAt: 5, Cwd: "/w", ParentSession: "p", IsSeeded: true, Origin: "subagent", DelegationDepth: 2, AgentPreset: "x"}
	want := `{"type":"session","version":3,"id":"s","createdAt":5,"cwd":"/w","parentSession":"p","isSeeded":true,"origin":"subagent","delegationDepth":2,"agentPreset":"x"}` + "\n"
	if got := string(HeaderLine(h)); got != want {
		t.Errorf("header line\n got %s\nwant %s", got, want)
	}
	back, err := ParseHeader([]byte(want[:len(want)-1]))
	if err != nil || back != h {
		t.Errorf("ParseHeader = %+v, %v", back, err)
	}
	if _, err := ParseHeader([]byte(`{"type":"session","version":4,"id":"s"}`)); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "v4") {
		t.Errorf("v4 header: %v", err)
	}
	if _, err := ParseHeader([]byte(`{"type":"session","version":3,"id":"s","createdAt":1,"isSeeded":false,"delegationDepth":0,"sandboxMode":"x"}`)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("retired key accepted: %v", err)
	}
}

func TestSourceSeqCompaction(t *testing.T) {
	e := event.Event{Seq: 9, Type: "tool/result", Data: json.RawMessage(`{}`), SourceEventSeqs: []uint64{1, 2, 3, 5, 6, 7, 8}, SurfaceOp: json.RawMessage(`"append"`)}
	line := EventLine(&e)
	if !strings.Contains(string(line), `"sourceEventSeqs":[[1,3],[5,8]]`) {
		t.Errorf("line %s", line)
	}
	back, err := ParseEvent(line[:len(line)-1])
	if err != nil || !cmp.Equal(back.SourceEventSeqs, e.SourceEventSeqs) {
		t.Errorf("round trip %v, %v", back.SourceEventSeqs, err)
	}
	e.SourceEventSeqs = []uint64{4, 2}
	if got := string(EventLine(&e)); !strings.Contains(got, `"sourceEventSeqs":[4,2]`) {
		t.Errorf("non-increasing list changed: %s", got)
	}
}

func TestRoundTripAndTornTail(t *testing.T) {
	h := store.Header{Version: 3, ID: "s", CreatedAt: 1, DelegationDepth: 0}
	evs := testgen.Events(0, 25, 200)
	for _, compressed := range []bool{false, true} {
		b, err := Encode(h, evs, compressed, []int{10, 10, 5})
		if err != nil {
			t.Fatal(err)
		}
		log, err := Parse(b, compressed)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(evs, log.Events); diff != "" || log.Header != h || log.Cut != nil {
			t.Fatalf("compressed=%v: round trip mismatch %s (cut %+v)", compressed, diff, log.Cut)
		}
		if compressed {
			b = b[:len(b)-20] // a torn last frame
		} else {
			b = append(b, `{"type":"assistant/chunk","seq":25,"ti`...)
		}
		log, err = Parse(b, compressed)
		if err != nil || log.Cut == nil || len(log.Events) > 25 {
			t.Fatalf("compressed=%v: torn tail: %d events, cut %+v, %v", compressed, len(log.Events), log.Cut, err)
		}
	}
}

func TestCommittedBadRowIsCorrupt(t *testing.T) {
	b := []byte(string(HeaderLine(store.Header{Version: 3, ID: "s"})) +
		`{"type":"turn/start","seq":0,"time":1,"data":{}}` + "\n" +
		`{not json}` + "\n" +
		`{"type":"turn/end","seq":1,"time":1,"data":{}}` + "\n")
	if _, err := Parse(b, false); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Parse = %v, want ErrCorrupt", err)
	}
}

// A damaged zstd frame in the middle of a log (good frames after it) is
// corruption, never a torn tail that would drop the frames after it; the
// same damage in the last frame is a torn tail.
func TestDamagedMiddleFrameIsCorrupt(t *testing.T) {
	h := store.Header{Version: 3, ID: "s", CreatedAt: 1}
	evs := testgen.Events(0, 30, 200)
	b, err := Encode(h, evs, true, []int{10, 10, 10})
	if err != nil {
		t.Fatal(err)
	}
	starts := frameStarts(b)
	if len(starts) < 4 {
		t.Fatalf("%d frames, want the header's and 3 batches'", len(starts))
	}
	middle := bytes.Clone(b)
	middle[starts[2]+len(zstdMagic)+8] ^= 0xff // inside the second batch's frame
	_, err = Parse(middle, true)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", starts[2])) {
		t.Errorf("damaged middle frame: %v, want ErrCorrupt at byte %d", err, starts[2])
	}
	last := bytes.Clone(b)
	last[starts[3]+len(zstdMagic)+8] ^= 0xff
	log, err := Parse(last, true)
	if err != nil {
		t.Fatalf("damaged last frame: %v, want a torn frame", err)
	}
	if len(log.Events) != 20 || log.Cut == nil || log.Cut.Kind != CutTornFrame || log.Cut.FrameAt != starts[3] || log.Cut.FrameBytes != len(b)-starts[3] {
		t.Errorf("damaged last frame: %v events, cut %+v, %v; want the 20 before it and a torn frame from byte %d", len(log.Events), log.Cut, err, starts[3])
	}
}

// A torn write after the last complete frame that did not reach the disk
// as a frame (zeros: a file system that extended the file before writing
// its blocks; or any bytes without a frame magic) is the torn tail: the
// complete frames before it are kept, the last one too. A damaged magic
// in the middle is corruption at that frame, not at the good one before
// it.
func TestTornBytesAfterTheLastFrame(t *testing.T) {
	h := store.Header{Version: 3, ID: "s", CreatedAt: 1}
	evs := testgen.Events(0, 30, 200)
	b, err := Encode(h, evs, true, []int{10, 10, 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tail := range [][]byte{make([]byte, 20), []byte("\x01\x02\x03"), {0x28, 0xB5}} {
		log, err := Parse(append(bytes.Clone(b), tail...), true)
		if err != nil || len(log.Events) != 30 || log.Cut == nil || log.Cut.Kind != CutTornFrame || log.Cut.FrameAt != len(b) || log.Cut.FrameBytes != len(tail) || log.Cut.Rows != 0 || log.Cut.Line != 32 {
			n, cut := -1, (*Cut)(nil)
			if log != nil {
				n, cut = len(log.Events), log.Cut
			}
			t.Errorf("tail %x: %d events, cut %+v, %v; want all 30 and a torn frame of %d bytes at byte %d, line 32", tail, n, cut, err, len(tail), len(b))
		}
	}
	starts := frameStarts(b)
	middle := bytes.Clone(b)
	middle[starts[2]] ^= 0xff // the second batch's magic
	_, err = Parse(middle, true)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("frame at byte %d,", starts[2])) {
		t.Errorf("damaged magic of a middle frame: %v, want ErrCorrupt at byte %d", err, starts[2])
	}
}

// The released v0 and v1 logs: file names, the header with seedLength
// instead of isSeeded, packed assistant rows expanded.
func TestFormatV0V1Logs(t *testing.T) {
	if FileNameOf(0, false) != "session.jsonl" || FileNameOf(1, true) != "session.v1.jsonl.zstd" {
		t.Fatalf("names: %s %s", FileNameOf(0, false), FileNameOf(1, true))
	}
	log, err := Parse([]byte(`{"type":"session","version":1,"id":"child","createdAt":5,"parentSession":"p","seedLength":2,"delegationDepth":0}
{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}
{"type":"text-chunks","seq0":1,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[2,3],"texts":["a","b","c"]}}
{"type":"tool-call-chunks","seq0":4,"time0":20,"data":{"turn":1,"step":1,"index":1,"id":"call","name":"read","dt":[],"args":["{}"]}}
{"type":"session/end-seed","seq":5,"time":30,"data":{}}
`), false)
	if err != nil {
		t.Fatal(err)
	}
	h := log.Header
	if h.Version != 1 || !h.IsSeeded || h.ParentSession != "p" || log.Inherited != 2 || len(log.Events) != 6 {
		t.Fatalf("log = %+v", log)
	}
	want := []string{
		`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}@10`,
		`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"b"}}@12`,
		`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"c"}}@15`,
		`{"turn":1,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"call","name":"read","argumentsDelta":"{}"}}@20`,
	}
	for i, w := range want {
		e := log.Events[1+i]
		if got := fmt.Sprintf("%s@%d", e.Data, e.Time); e.Type != "assistant/chunk" || e.Seq != uint64(1+i) || got != w {
			t.Errorf("event %d = %s %s, want %s", 1+i, e.Type, got, w)
		}
	}
	unseeded, err := Parse([]byte(`{"type":"session","version":0,"id":"old","createdAt":5,"delegationDepth":0}`+"\n"), false)
	if err != nil || unseeded.Header.IsSeeded || unseeded.Header.Version != 0 {
		t.Fatalf("v0 = %+v, %v", unseeded, err)
	}
	for _, bad := range []struct{ log, want string }{
		{`{"type":"session","version":1,"id":"x","createdAt":5,"isSeeded":false,"delegationDepth":0}`, `released v1 physical header has unexpected member "isSeeded"`},
		{`{"type":"session","version":1,"id":"x","delegationDepth":0}`, `released v1 physical header lacks required member "createdAt"`},
		{`{"type":"session","version":1,"id":"x","createdAt":5,"seedLength":-1,"delegationDepth":0}`, `released v1 header seedLength must be a non-negative safe integer`},
		{`{"type":"session","version":1,"id":"x","createdAt":5,"seedLength":3,"delegationDepth":0}`, `seedLength 3 exceeds the log's 0 events`},
		{`{"type":"session","version":-1,"id":"x","createdAt":5,"delegationDepth":0}`, `log format v-1 is no format`},
		{`{"type":"session","version":2,"id":"x","createdAt":5,"seedLength":0,"isSeeded":true,"delegationDepth":0}`, `header key "seedLength"`},
	} {
		if _, err := Parse([]byte(bad.log+"\n"), false); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%s) = %v, want %q", bad.log, err, bad.want)
		}
	}
	// A malformed packed row, committed: corrupt.
	_, err = Parse([]byte(`{"type":"session","version":1,"id":"x","createdAt":5,"delegationDepth":0}
{"type":"text-chunks","seq0":0,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[],"texts":["a","b"]}}
{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"completed"}}}
`), false)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "dt length must match") {
		t.Errorf("bad packed row: %v", err)
	}
}

// TestParseReportsTheCut: what the torn-tail rule drops is reported, as
// Log.Cut: the kind, the line where the dropped rows begin (of the file:
// the header is line 1), how many rows and bytes, and the problem. The
// rule itself is the reference's: a bad row drops every row after it,
// good ones too (no turn/end follows here).
func TestParseReportsTheCut(t *testing.T) {
	row := func(seq int) string {
		return fmt.Sprintf(`{"type":"user/message","seq":%d,"time":1,"data":{"text":"m%d"}}`, seq, seq) + "\n"
	}
	head := string(HeaderLine(store.Header{Version: 3, ID: "s", CreatedAt: 1}))
	v1head := `{"type":"session","version":1,"id":"s","createdAt":5,"delegationDepth":0}` + "\n"
	packed := `{"type":"text-chunks","seq0":1,"time0":10,"data":{"turn":1,"step":1,"index":0,"dt":[2,3],"texts":["a","b","c"]}}` + "\n"
	const partial = `{"type":"user/message","seq":4,"ti`
	for _, c := range []struct {
		name string
		log  string
		kept int // events
		want Cut
	}{
		{"a garbage line mid-log", head + row(0) + "garbage\n" + row(1) + row(2) + row(3), 1,
			Cut{Kind: CutBadRow, Reason: "not a JSON object", Line: 3, Rows: 4, Bytes: len("garbage\n") + len(row(1)+row(2)+row(3))}},
		{"a repeated seq mid-log", head + row(0) + row(1) + row(1) + row(2) + row(3), 2,
			Cut{Kind: CutBadRow, Reason: "seq 1 repeats: 2 events before it, so seq 2 was next", Line: 4, Rows: 3, Bytes: len(row(1) + row(2) + row(3))}},
		{"a seq gap", head + row(0) + row(2) + row(3), 1,
			Cut{Kind: CutBadRow, Reason: "seq 2 skips ahead: 1 events before it, so seq 1 was next", Line: 3, Rows: 2, Bytes: len(row(2) + row(3))}},
		{"a torn last line", head + row(0) + row(1) + row(2) + row(3) + partial, 4,
			Cut{Kind: CutIncompleteLine, Reason: "the last line has no newline: a write cut short", Line: 6, Rows: 1, Bytes: len(partial)}},
		{"a bad row, then a torn last line", head + row(0) + "{}\n" + row(1) + partial, 1,
			Cut{Kind: CutBadRow, Reason: "type, seq and time are required", Line: 3, Rows: 3, Bytes: len("{}\n" + row(1) + partial)}},
		{"a row whose data is no object", head + row(0) + row(1) + `{"type":"user/message","seq":2,"time":1,"data":[]}` + "\n" + row(3), 2,
			Cut{Kind: CutBadRow, Reason: `event: invalid event at index 2 (seq 2, type "user/message"): data is not a JSON object`, Line: 4, Rows: 2,
				Bytes: len(`{"type":"user/message","seq":2,"time":1,"data":[]}`+"\n") + len(row(3))}},
		{"an empty line", head + row(0) + "\n" + row(1), 1,
			Cut{Kind: CutBadRow, Reason: "not a JSON object", Line: 3, Rows: 2, Bytes: 1 + len(row(1))}},
		// A packed row is one line of the file for three events.
		{"after a packed v1 row", v1head + row(0) + packed + row(4) + "x\n" + row(5), 5,
			Cut{Kind: CutBadRow, Reason: "not a JSON object", Line: 5, Rows: 2, Bytes: len("x\n" + row(5))}},
	} {
		log, err := Parse([]byte(c.log), false)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(log.Events) != c.kept || log.Cut == nil || *log.Cut != c.want {
			t.Errorf("%s: %d events, cut %+v; want %d events, cut %+v", c.name, len(log.Events), log.Cut, c.kept, c.want)
		}
	}

	// The same in a .zstd log (lines of its decompressed text), whose
	// torn last frame is part of the cut.
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	z := enc.EncodeAll([]byte(head+row(0)), nil)
	z = enc.EncodeAll([]byte(row(1)+row(1)+row(2)), z)
	good := len(z)
	z = enc.EncodeAll([]byte(row(3)), z)
	z = z[:len(z)-3] // the last frame torn
	log, err := Parse(z, true)
	want := Cut{Kind: CutBadRow, Reason: "seq 1 repeats: 2 events before it, so seq 2 was next", Line: 4, Rows: 2, Bytes: len(row(1) + row(2)), FrameAt: good, FrameBytes: len(z) - good}
	if err != nil {
		t.Fatalf(".zstd: %v", err)
	}
	if len(log.Events) != 2 || log.Cut == nil || *log.Cut != want {
		t.Errorf(".zstd: %d events, cut %+v; want 2 events, cut %+v", len(log.Events), log.Cut, want)
	}
	// A torn last frame alone: the line its rows would have begun at.
	z = enc.EncodeAll([]byte(head+row(0)+row(1)), nil)
	good = len(z)
	z = enc.EncodeAll([]byte(row(2)), z)
	z = z[:len(z)-3]
	log, err = Parse(z, true)
	if err != nil {
		t.Fatalf(".zstd, torn last frame: %v", err)
	}
	if c := log.Cut; len(log.Events) != 2 || c == nil || c.Kind != CutTornFrame || c.Line != 4 || c.Rows != 0 || c.Bytes != 0 ||
		c.FrameAt != good || c.FrameBytes != len(z)-good || !strings.Contains(c.Reason, fmt.Sprintf("from byte %d", good)) {
		t.Errorf(".zstd, torn last frame: %d events, cut %+v; want 2, a torn frame at byte %d, line 4", len(log.Events), c, good)
	}

	// A bad row that a turn/end follows was committed: no cut, an error
	// naming its line.
	_, err = Parse([]byte(head+row(0)+"garbage\n"+row(1)+`{"type":"turn/end","seq":2,"time":1,"data":{}}`+"\n"), false)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "line 3: not a JSON object") {
		t.Errorf("a committed bad row: %v, want ErrCorrupt at line 3", err)
	}
	// However the turn/end row is spaced (a log another tool wrote, as
	// Python's json.dumps spaces it), and whatever the bad row is.
	for _, bad := range []string{"garbage", "{}", `{"type":"turn/start","seq":9,"time":1,"data":{}}`, `{"type":"turn/start","seq":1,"time":1,"data":[1]}`} {
		_, err = Parse([]byte(head+row(0)+bad+"\n"+`{"type": "turn/end", "seq": 1, "time": 3, "data": {"turn": 0}}`+"\n"), false)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("a committed bad row %s before a spaced turn/end: %v, want ErrCorrupt at line 3", bad, err)
		}
	}
	// A row that only mentions turn/end is no turn/end.
	log, err = Parse([]byte(head+row(0)+"garbage\n"+`{"type":"user/message","seq":1,"time":1,"data":{"text":"turn/end"}}`+"\n"), false)
	if err != nil || len(log.Events) != 1 || log.Cut == nil || log.Cut.Rows != 2 {
		t.Errorf("a row that mentions turn/end after a bad row: %v, %+v; want a cut of 2 rows", err, log)
	}
}

// TestCommittedOutOfOrderRow checks what Parse names when a turn/end
// follows a bad row: a row that parsed but whose seq is not the next one
// is named out of order (its seq skips ahead, or repeats), not
// unparsable; a row that does not parse still is.
func TestCommittedOutOfOrderRow(t *testing.T) {
	row := func(seq int) string {
		return fmt.Sprintf(`{"type":"turn/start","seq":%d,"time":1,"data":{"turn":%d}}`+"\n", seq, seq)
	}
	head := string(HeaderLine(store.Header{Version: 3, ID: "s", CreatedAt: 1}))
	end := `{"type":"turn/end","seq":3,"time":1,"data":{"turn":0}}` + "\n"
	for _, c := range []struct {
		name, bad, want string
	}{
		{"skips ahead", row(4), "committed event at line 4 out of order: it parses, but its seq 4 skips ahead: 2 events before it, so seq 2 was next (a turn/end follows, at line 5)"},
		{"repeats", row(1), "committed event at line 4 out of order: it parses, but its seq 1 repeats: 2 events before it, so seq 2 was next (a turn/end follows, at line 5)"},
		{"unparsable", "garbage\n", "unparsable committed event at line 4: not a JSON object"},
	} {
		_, err := Parse([]byte(head+row(0)+row(1)+c.bad+end), false)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrCorrupt saying %q", c.name, err, c.want)
		}
		if c.name != "unparsable" && err != nil && strings.Contains(err.Error(), "unparsable") {
			t.Errorf("%s: %v calls a row that parsed unparsable", c.name, err)
		}
	}
}
