package recovery

import (
	"errors"
	"reflect"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/testgen"
)

// sameState fails t unless a and b are the same state (Last compared by
// value, From left out: where each fold started).
func sameState(t *testing.T, what string, a, b State) {
	t.Helper()
	la, lb := a.Last, b.Last
	a.Last, b.Last = nil, nil
	a.From, b.From = 0, 0
	if !reflect.DeepEqual(a, b) || (la == nil) != (lb == nil) || (la != nil && (la.Seq != lb.Seq || la.Time != lb.Time || la.Type != lb.Type)) {
		t.Fatalf("%s: %+v (last %+v), want %+v (last %+v)", what, a, la, b, lb)
	}
}

// checkFoldFrom: over every cut of log, a fold from each turn boundary
// before the cut (and from seq 0) is the fold of the whole cut log, and
// TurnFrom names the last boundary.
func checkFoldFrom(t *testing.T, log []event.Event) {
	t.Helper()
	for k := 0; k <= len(log); k++ {
		whole, err := Fold(log[:k])
		if err != nil {
			t.Fatalf("fold of %d events: %v", k, err)
		}
		if want := LastTurnBoundary(log[:k]); whole.TurnFrom != want {
			t.Fatalf("cut %d: TurnFrom %d, the last boundary is %d", k, whole.TurnFrom, want)
		}
		for b := 0; b < k; b++ {
			st, err := FoldFrom(log[b:k])
			if b > 0 && !IsTurnBoundary(log[b].Type) {
				if !errors.Is(err, ErrNotBoundary) {
					t.Fatalf("fold from seq %d (%s): %v, want ErrNotBoundary", b, log[b].Type, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("fold from seq %d of %d events: %v", b, k, err)
			}
			if st.From != uint64(b) {
				t.Fatalf("fold from seq %d: From %d", b, st.From)
			}
			sameState(t, "fold from a boundary", st, whole)
			if got, want := Closers(st), Closers(whole); !reflect.DeepEqual(got, want) {
				t.Fatalf("cut %d, from %d: closers %v, want %v", k, b, got, want)
			}
		}
	}
}

func TestFoldFromABoundaryIsTheWholeFold(t *testing.T) {
	for seed := range uint64(12) {
		checkFoldFrom(t, testgen.AgentLog(seed, 100, 0))
	}
}

// FuzzFoldFrom: on any sequence the fold accepts, a fold from any turn
// boundary is the fold of the whole log.
func FuzzFoldFrom(f *testing.F) {
	f.Add([]byte{0, 2, 4, 5, 6})
	f.Add([]byte{0, 2, 4, 0x25, 3, 1, 0, 2, 0x44, 5})
	f.Add([]byte{0, 2, 4, 5, 0x45, 7, 0, 1, 7, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 64 {
			b = b[:64]
		}
		log := build(eventsFromBytes(b)).evs
		if _, err := Fold(log); err != nil {
			return
		}
		checkFoldFrom(t, log)
	})
}

func TestFoldFromRefusesAStartThatIsNoBoundary(t *testing.T) {
	log := testgen.AgentLog(1, 30, 0)
	for b := 1; b < len(log); b++ {
		if IsTurnBoundary(log[b].Type) {
			continue
		}
		if _, err := FoldFrom(log[b:]); !errors.Is(err, ErrNotBoundary) {
			t.Fatalf("fold from seq %d (%s): %v, want ErrNotBoundary", b, log[b].Type, err)
		}
		return
	}
	t.Fatal("no event that is not a boundary")
}
