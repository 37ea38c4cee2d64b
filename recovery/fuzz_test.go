package recovery

import (
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
