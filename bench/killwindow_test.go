package bench

import (
	"context"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
)

// TestKillWindow runs the window-durability workload briefly (2 rounds)
// on the engine and on the reference model: nothing flushed and nothing
// older than the window plus one sync is lost, every interrupted turn is
// closed, the store's check is clean, and the figures add up.
func TestKillWindow(t *testing.T) {
	for _, backend := range []string{"seglog", "jsonl"} {
		t.Run(backend, func(t *testing.T) {
			r, err := Run(context.Background(), Config{Workload: KillWindow, Dir: t.TempDir(), Rounds: 2, Backend: backend})
			if err != nil {
				t.Fatal(err)
			}
			k := r.Kill
			if k == nil || len(k.Rounds) != 2 {
				t.Fatalf("result %+v", r)
			}
			t.Logf("%s: handed %d, acked %d, lost %d (older than the bound %v: %d), oldest lost %v, flushed lost %d, sessions %d (missing %d), interrupted turns closed %d, unclosed %d, check problems %d, problems %q",
				backend, k.Handed, k.Acked, k.Lost, k.Bound, k.LostOld, k.OldestLost, k.FlushedLost, k.Sessions, k.Missing, k.Interrupted, k.Unclosed, k.CheckProblems, k.Problems)
			if !k.Promised() {
				t.Errorf("the promise was not kept: %d lost older than %v, %d flushed lost, %d unclosed, %d check problems: %q",
					k.LostOld, k.Bound, k.FlushedLost, k.Unclosed, k.CheckProblems, k.Problems)
			}
			if r.Events != k.Handed || k.Handed <= 0 || k.Acked > k.Handed || k.Lost > k.Handed || k.Sessions != 2*8 || k.Interrupted == 0 {
				t.Errorf("implausible figures: %+v", k.KillTotals)
			}
			if k.Window != 200*time.Millisecond || k.Bound < k.Window+KillSlack {
				t.Errorf("window %v, bound %v", k.Window, k.Bound)
			}
			var sum KillTotals
			for i, kr := range k.Rounds {
				if kr.KillAfter < KillMin || kr.KillAfter >= KillMax || kr.Handed == 0 {
					t.Errorf("round %d: killed %v after the start, %d events handed over", i, kr.KillAfter, kr.Handed)
				}
				if kr.Lost > 0 && (kr.OldestLost <= 0 || kr.OldestLost > kr.Bound) {
					t.Errorf("round %d: %d lost, the oldest %v before the kill, the bound %v", i, kr.Lost, kr.OldestLost, kr.Bound)
				}
				sum.add(kr.KillTotals)
			}
			if sum.Handed != k.Handed || sum.Lost != k.Lost || sum.OldestLost != k.OldestLost {
				t.Errorf("the totals %+v are not the rounds' %+v", k.KillTotals, sum)
			}
		})
	}
}

// TestKillWindowCatchesFlushOnly: a worker whose events are durable only
// at a Flush (Options.FlushOnly, the weaker promise) loses events older
// than the bound, and the workload says so.
func TestKillWindowCatchesFlushOnly(t *testing.T) {
	r, err := Run(context.Background(), Config{Workload: KillWindow, Dir: t.TempDir(), Rounds: 2,
		Options: &engine.Options{FlushOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	k := r.Kill
	t.Logf("flush-only: handed %d, lost %d (older than %v: %d), oldest lost %v, sessions %d (missing %d)", k.Handed, k.Lost, k.Bound, k.LostOld, k.OldestLost, k.Sessions, k.Missing)
	if !k.FlushOnly || k.LostOld == 0 || k.Promised() || k.OldestLost <= k.Bound {
		t.Fatalf("a flush-only worker killed twice lost %d events older than %v (oldest %v): the workload did not see it (%+v)", k.LostOld, k.Bound, k.OldestLost, k.KillTotals)
	}
	// Every session handed something over, so every one is judged, also
	// those the kill left unknown to the store (never flushed).
	if k.Sessions != 2*8 || k.FlushedLost != 0 || k.CheckProblems != 0 || k.Unclosed != 0 {
		t.Errorf("flush-only still keeps what was flushed and a sound store: %+v", k.KillTotals)
	}
}
