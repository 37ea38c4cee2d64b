package recovery

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/event"
)

func ev(seq uint64, typ, data string) event.Event {
	return event.Event{Seq: seq, Type: typ, Time: int64(1000 + seq), Data: json.RawMessage(data)}
}

// v2Log is a v2 turn with a replace envelope in v2's keys, as in
// REFERENCE-cases.md J31: the replace at seq 3 covers seq 2.
func v2Log() []event.Event {
	evs := []event.Event{
		ev(0, "turn/start", `{"turn":"t1"}`),
		ev(1, "step/start", `{"turn":"t1","step":"s1"}`),
		ev(2, "user/message", `{"id":"u1","role":"user","content":[],"source":{"kind":"user"}}`),
		ev(3, "user/message", `{"id":"u2","role":"user","content":[],"source":{"kind":"user"}}`),
		ev(4, "step/end", `{"turn":"t1","step":"s1"}`),
		ev(5, "turn/end", `{"turn":"t1","reason":{"kind":"completed"}}`),
	}
	evs[2].SurfaceOp = json.RawMessage(`"append"`)
	evs[2].SourceEventSeqs = []uint64{0}
	evs[3].SurfaceOp = json.RawMessage(`{"op":"replace","start":2,"end":2}`)
	evs[3].SourceEventSeqs = []uint64{2}
	return evs
}

func TestMigrateV2(t *testing.T) {
	in := v2Log()
	before := cloneAll(in)
	out, err := MigrateV2("sess-1", in)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, in); diff != "" {
		t.Fatalf("input modified:\n%s", diff)
	}
	var types []string
	for i, e := range out {
		if e.Seq != uint64(i) {
			t.Errorf("event %d has seq %d", i, e.Seq)
		}
		types = append(types, e.Type)
	}
	want := []string{"turn/start", "step/start", "system/message", "user/message", "user/message", "step/end", "turn/end"}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Fatalf("types (-want +got):\n%s", diff)
	}
	head := out[2]
	var d struct {
		Turn, Step string
		Message    struct {
			ID      string
			Role    string
			Content []any
			Source  map[string]string
		}
	}
	if err := json.Unmarshal(head.Data, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Message.ID, "v2-to-v3-system-") || len(d.Message.ID) != len("v2-to-v3-system-")+64 ||
		d.Turn != "t1" || d.Step != "s1" || d.Message.Role != "system" || d.Message.Content == nil || len(d.Message.Content) != 0 ||
		d.Message.Source["plugin"] != SystemPromptPlugin || head.Time != out[1].Time || string(head.SurfaceOp) != `"append"` {
		t.Errorf("system head = %+v (%s)", d, head.Data)
	}
	// J31: the replace now reads startSeq/endSeq 3 and cites seq 3.
	if got := string(out[4].SurfaceOp); got != `{"op":"replace","startSeq":3,"endSeq":3}` {
		t.Errorf("replace surfaceOp = %s", got)
	}
	if diff := cmp.Diff([]uint64{3}, out[4].SourceEventSeqs); diff != "" {
		t.Errorf("replace sourceEventSeqs: %s", diff)
	}
	if diff := cmp.Diff([]uint64{0}, out[3].SourceEventSeqs); diff != "" {
		t.Errorf("seqs before the head must not move: %s", diff)
	}
	// The fold accepts the migrated log as a balanced one.
	if st, err := Fold(out); err != nil || !st.Balanced() {
		t.Errorf("Fold(migrated) = %+v, %v", st, err)
	}
	again, err := MigrateV2("sess-1", in)
	if err != nil || !cmp.Equal(out, again) {
		t.Errorf("migration is not deterministic: %v", err)
	}
	other, _ := MigrateV2("sess-2", in)
	if string(other[2].Data) == string(head.Data) {
		t.Error("two sessions got the same head id")
	}
}

func TestMigrateV2NoStep(t *testing.T) {
	in := []event.Event{ev(0, "turn/start", `{"turn":"t1"}`)}
	out, err := MigrateV2("s", in)
	if err != nil || len(out) != 1 || out[0].Type != "turn/start" {
		t.Fatalf("MigrateV2 = %+v, %v", out, err)
	}
	empty, err := MigrateV2("s", nil)
	if err != nil || len(empty) != 0 {
		t.Fatalf("MigrateV2(nil) = %+v, %v", empty, err)
	}
}

func TestMigrateV2Refusals(t *testing.T) {
	unknown := v2Log()
	unknown[4] = ev(4, "x/custom", `{}`)
	unknown[4].Ignorable = true // historical migration refuses even ignorable unknowns
	_, err := MigrateV2("s", unknown)
	var ue *event.UnsupportedError
	if !errors.As(err, &ue) || ue.Seq != 4 || ue.Type != "x/custom" || !strings.Contains(err.Error(), `unknown historical event type "x/custom" at seq 4`) {
		t.Errorf("unknown type: %v", err)
	}
	gap := v2Log()
	gap[3].Seq = 7
	if _, err := MigrateV2("s", gap); !errors.Is(err, ErrSequence) {
		t.Errorf("seq gap: %v", err)
	}
	bad := v2Log()
	bad[3].SurfaceOp = json.RawMessage(`{"op":"replace","start":3,"end":2}`)
	if _, err := MigrateV2("s", bad); !errors.Is(err, ErrMigration) || !strings.Contains(err.Error(), "has an invalid surface replacement") {
		t.Errorf("inverted span: %v", err)
	}
}

func cloneAll(evs []event.Event) []event.Event {
	out := make([]event.Event, len(evs))
	for i := range evs {
		out[i] = evs[i].Clone()
	}
	return out
}
