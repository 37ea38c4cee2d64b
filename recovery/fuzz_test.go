package recovery

import (
	"fmt"
	"testing"
)

// eventsFromBytes turns fuzz bytes into an event sequence: each byte picks
// an event type (low 3 bits) and a tool-call id (high bits).
func eventsFromBytes(b []byte) []event2 {
	var out []event2
	for _, c := range b {
		out = append(out, event2{kind: int(c & 7), id: string(rune('a' + c>>5))})
	}
	return out
}

type event2 struct {
	kind int
	id   string
}

func build(ops []event2) *logBuilder {
	l := newLog()
	for _, op := range ops {
		switch op.kind {
		case 0:
			l.turnStart(1)
		case 1:
			l.turnEnd(1)
		case 2:
			l.stepStart(1, 2)
		case 3:
			l.stepEnd(1, 2)
		case 4:
			l.assistant(1, 2, op.id, op.id+"2")
		case 5:
			l.toolCall(1, 2, op.id)
		case 6:
			l.toolResult(1, 2, op.id)
		default:
			l.endSeed(op.id < "e")
		}
	}
	return l
}

// FuzzFold: the fold never panics on any sequence, and whenever it accepts
// a log, the closers balance it.
func FuzzFold(f *testing.F) {
	f.Add([]byte{0, 2, 4, 5, 6})
	f.Add([]byte{0, 2, 4, 0x25, 3, 1})
	f.Add([]byte{0, 2, 4, 5, 0x45, 7, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		log := build(eventsFromBytes(b)).evs
		st, err := Fold(log)
		if err != nil {
			return
		}
		closers, err := InterruptedTurnClosers(log)
		if err != nil {
			t.Fatalf("closers of an accepted log: %v", err)
		}
		if st.Balanced() != (len(closers) == 0) {
			t.Fatalf("balanced %v but %d closers", st.Balanced(), len(closers))
		}
		for i, c := range closers {
			if err := c.Validate(i); err != nil {
				t.Fatalf("closer %d invalid: %v", i, err)
			}
		}
		bal := append(log[:len(log):len(log)], closers...)
		end, err := Fold(bal)
		if err != nil || !end.Balanced() {
			t.Fatalf("balanced view folds to %+v, %v", end, err)
		}
	})
}

// FuzzMigrateV2: migration never panics; when it accepts a log, the
// result has contiguous seqs, exactly one inserted head (after the first
// step/start) or none, every source event in order with its seqs mapped,
// and a log the fold accepted stays acceptable. Replace spans come from
// the top bits of the bytes.
func FuzzMigrateV2(f *testing.F) {
	f.Add([]byte{0, 2, 4, 5, 6, 3, 1})
	f.Add([]byte{0, 2, 0x86, 3, 1, 0, 2, 3, 1})
	f.Add([]byte{7, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		log := build(eventsFromBytes(b)).evs
		for i := range log { // some results become v2 replaces of an earlier seq
			if i < len(b) && b[i]&0x80 != 0 && i > 0 && log[i].SurfaceOp != nil {
				at := uint64(b[i]>>3&0x0f) % uint64(i)
				log[i].SurfaceOp = []byte(fmt.Sprintf(`{"op":"replace","start":%d,"end":%d}`, at, at))
			}
		}
		out, err := MigrateV2("fz", log)
		if err != nil {
			return
		}
		step := -1
		for i := range log {
			if log[i].Type == TypeStepStart {
				step = i
				break
			}
		}
		want := len(log)
		if step >= 0 {
			want++
		}
		if len(out) != want {
			t.Fatalf("%d events in, %d out (first step/start at %d)", len(log), len(out), step)
		}
		shift := func(s uint64) uint64 {
			if step >= 0 && s > uint64(step) {
				return s + 1
			}
			return s
		}
		j := 0
		for i := range out {
			if out[i].Seq != uint64(i) {
				t.Fatalf("event %d has seq %d", i, out[i].Seq)
			}
			if step >= 0 && i == step+1 {
				if out[i].Type != TypeSystemMessage {
					t.Fatalf("no head after the step/start: %s", out[i].Type)
				}
				continue
			}
			if out[i].Type != log[j].Type || string(out[i].Data) != string(log[j].Data) || len(out[i].SourceEventSeqs) != len(log[j].SourceEventSeqs) {
				t.Fatalf("event %d is not source event %d", i, j)
			}
			for k, s := range log[j].SourceEventSeqs {
				if out[i].SourceEventSeqs[k] != shift(s) {
					t.Fatalf("event %d cites %d, source cited %d", i, out[i].SourceEventSeqs[k], s)
				}
			}
			j++
		}
		if _, err := Fold(log); err == nil {
			if _, err := Fold(out); err != nil {
				t.Fatalf("the fold accepted the v2 log but not its migration: %v", err)
			}
		}
	})
}
