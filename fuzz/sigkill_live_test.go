package fuzz

import (
	"bufio"
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestSIGKILLLiveReader: this process holds the store open read-only for
// the whole campaign while writer processes (childWriter) append and
// flush and are killed with SIGKILL at random moments. Each time a writer
// reports a flush, a read started afterwards here must see at least the
// flushed events, intact and in order (the freshness rule across
// processes); after each kill the reader keeps serving them, the next
// writer opens the store while the reader has it open, and continues every
// session from what is stored.
//
// 16 rounds (8 with -short, 100 with SEGLOG_LONG=1; SEGLOG_SIGKILL_ROUNDS=n:
// n).
func TestSIGKILLLiveReader(t *testing.T) {
	rounds := sigkillRounds(t, 8, 16, 100)
	dir := t.TempDir()
	ctx := context.Background()
	acked := map[string]uint64{}
	var reader *engine.DB
	defer func() {
		if reader != nil {
			reader.Close()
		}
	}()
	checks := 0
	// check reads session id (whole, or only its last flushed event) and
	// compares it with what the writer wrote.
	check := func(round int, id string, n uint64, whole bool) {
		t.Helper()
		h, err := reader.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("round %d: reader: open %s (%d events flushed): %v", round, id, n, err)
		}
		defer h.Close()
		from := 0
		if !whole {
			from = int(n) - 1
		}
		evs, err := h.Read(ctx, from, -1)
		if err != nil {
			t.Fatalf("round %d: reader: read %s: %v", round, id, err)
		}
		if uint64(from+len(evs)) < n {
			t.Fatalf("round %d: reader: %s has %d events, the writer flushed %d before the read started", round, id, from+len(evs), n)
		}
		for i, e := range evs {
			seq := uint64(from + i)
			if want := testgen.Event(seq, childEventSize(seq)); !sameEvent(e, want) {
				t.Fatalf("round %d: reader: %s event %d is not what the writer wrote", round, id, seq)
			}
		}
		checks++
	}
	for round := range rounds {
		cmd, stdout, stderr := startChildWriter(t, dir, 1000+round)
		sc := bufio.NewScanner(stdout)
		deadline := time.Now().Add(time.Duration(30+rand.IntN(150)) * time.Millisecond)
		killed := false
		for sc.Scan() {
			id, n, ok := parseAck(sc.Text())
			if !ok {
				continue
			}
			acked[id] = max(acked[id], n)
			if reader == nil {
				// The first flush made a store: open it beside the writer.
				var err error
				if reader, err = enginetest.OpenStore(t, dir, &engine.Options{ReadOnly: true}); err != nil {
					t.Fatalf("round %d: read-only open beside a writer: %v", round, err)
				}
			}
			check(round, id, n, false)
			if !killed && time.Now().After(deadline) {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		if !killed {
			cmd.Process.Signal(syscall.SIGKILL)
		}
		waitKilled(t, cmd, stderr, round)
		if reader == nil {
			continue
		}
		for id, n := range acked {
			check(round, id, n, true)
		}
	}
	if reader == nil {
		t.Fatal("no writer ever flushed")
	}
	// What the reader serves is what a fresh open serves.
	reader.Close()
	reader = nil
	checkKilledStore(t, ctx, dir, acked, rounds)
	t.Logf("%d rounds, %d reads beside a writer, every flushed event seen", rounds, checks)
}
