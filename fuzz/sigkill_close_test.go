package fuzz

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// closeChildEnv names the store of closeChild.
const closeChildEnv = "SEGLOG_SIGKILL_CLOSE_DIR"

// closeChild opens the store, appends and flushes a few batches, closes
// it (as the only process: the close trims the active segment's room and
// compacts the index), and again, until it is killed, printing "ack
// <session> <events>" after each successful flush, as childWriter.
func closeChild(dir string) int {
	ctx := context.Background()
	seed, _ := strconv.ParseUint(os.Getenv("SEGLOG_SIGKILL_SEED"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 3))
	out := bufio.NewWriter(os.Stdout)
	for {
		db, err := enginetest.OpenUnchecked("a child process the parent SIGKILLs; the parent checks the store", dir, &engine.Options{SegmentSize: 1 << 20})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child open:", err)
			return 2
		}
		hs := map[string]*engine.Handle{}
		next := map[string]uint64{}
		for _, id := range childSessions {
			h, err := db.Open(ctx, id, store.Write)
			if errors.Is(err, store.ErrSessionNotFound) {
				h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "child open session:", err)
				return 2
			}
			evs, err := h.Read(ctx, 0, -1)
			if err != nil {
				fmt.Fprintln(os.Stderr, "child read:", err)
				return 2
			}
			hs[id], next[id] = h, uint64(len(evs))
		}
		for range 1 + r.IntN(10) {
			id := childSessions[r.IntN(len(childSessions))]
			n := 1 + r.IntN(40)
			evs := make([]event.Event, n)
			for i := range evs {
				seq := next[id] + uint64(i)
				evs[i] = testgen.Event(seq, childEventSize(seq))
			}
			if err := hs[id].Append(ctx, evs...); err != nil {
				fmt.Fprintln(os.Stderr, "child append:", err)
				return 2
			}
			next[id] += uint64(n)
			if err := hs[id].Flush(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "child flush:", err)
				return 2
			}
			fmt.Fprintf(out, "ack %s %d\n", id, next[id])
			out.Flush()
		}
		for _, h := range hs {
			h.Close()
		}
		fmt.Fprintln(out, "closing")
		out.Flush()
		if err := db.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "child close:", err)
			return 2
		}
		fmt.Fprintln(out, "closed")
		out.Flush()
	}
}

// TestSIGKILLInClose is the SIGKILL campaign of a process that closes the
// store often: each of its cycles opens it, flushes a few batches and
// closes it, the last process to, so that its close trims the active
// segment's preallocated room and compacts the index (docs/DURABILITY.md,
// Preallocation, "Trimmed at the last close"); the kill lands in an open,
// a write, a flush, a trim or a compaction (the log says how many kills
// came in a close). After each kill the store
// opens with every acknowledged event, intact (and the check's own close
// trims it again before the next round).
//
// 30 rounds (15 with -short, 200 with SEGLOG_LONG=1;
// SEGLOG_SIGKILL_ROUNDS=n: n), each killing the child 20-140 ms in.
func TestSIGKILLInClose(t *testing.T) {
	rounds := sigkillRounds(t, 15, 30, 200)
	dir := t.TempDir()
	ctx := context.Background()
	acked := map[string]uint64{}
	inClose, closes := 0, 0
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), closeChildEnv+"="+dir, "SEGLOG_SIGKILL_SEED="+strconv.Itoa(round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stderr := &strings.Builder{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		time.Sleep(time.Duration(20+rand.IntN(120)) * time.Millisecond)
		cmd.Process.Signal(syscall.SIGKILL)
		last := ""
		for line := range lines {
			if id, n, ok := parseAck(line); ok && n > acked[id] {
				acked[id] = n
			}
			if line == "closed" {
				closes++
			}
			last = line
		}
		if last == "closing" {
			inClose++
		}
		waitKilled(t, cmd, stderr, round)
		checkKilledStore(t, ctx, dir, acked, round)
	}
	var total uint64
	for _, n := range acked {
		total += n
	}
	t.Logf("%d SIGKILL rounds (%d killed in a close), %d closes, %d events acknowledged and found intact", rounds, inClose, closes, total)
}
