package fuzz

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

const childEnv = "SEGLOG_SIGKILL_CHILD_DIR"

var childSessions = []string{"k0", "k1", "k2", "k3"}

// childEventSize makes an event's size a function of its seq, so the
// parent can regenerate and compare every byte.
func childEventSize(seq uint64) int { return 100 + int(seq*37%900) }

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(childWriter(dir))
	}
	if dir := os.Getenv(mixChildEnv); dir != "" {
		os.Exit(mixChild(dir))
	}
	if dir := os.Getenv(multiDirEnv); dir != "" {
		os.Exit(multiChild(dir))
	}
	if dir := os.Getenv(noflushDirEnv); dir != "" {
		os.Exit(noflushChild(dir))
	}
	if dir := os.Getenv(liveDirEnv); dir != "" {
		os.Exit(liveChild(dir))
	}
	if dir := os.Getenv(closeChildEnv); dir != "" {
		os.Exit(closeChild(dir))
	}
	os.Exit(m.Run())
}

// childWriter appends and flushes until it is killed, printing after each
// successful flush "ack <session> <events>" on stdout.
func childWriter(dir string) int {
	ctx := context.Background()
	db, err := enginetest.OpenUnchecked("a child process the parent SIGKILLs; the parent checks the store", dir, &engine.Options{SegmentSize: 256 << 10})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	seed, _ := strconv.ParseUint(os.Getenv("SEGLOG_SIGKILL_SEED"), 10, 64)
	r := rand.New(rand.NewPCG(seed, 1))
	out := bufio.NewWriter(os.Stdout)
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
	for {
		id := childSessions[r.IntN(len(childSessions))]
		n := 1 + r.IntN(20)
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
		if r.IntN(3) > 0 {
			if err := hs[id].Flush(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "child flush:", err)
				return 2
			}
			fmt.Fprintf(out, "ack %s %d\n", id, next[id])
			out.Flush()
		}
	}
}

// sigkillRounds is the number of rounds of a SIGKILL campaign: short
// under -short, def by default, long with SEGLOG_LONG=1 (package
// internal/testlong); SEGLOG_SIGKILL_ROUNDS=n sets n rounds in every
// SIGKILL campaign instead.
func sigkillRounds(t *testing.T, short, def, long int) int {
	t.Helper()
	if s := os.Getenv(mixRoundsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q is not a positive number", mixRoundsEnv, s)
		}
		return n
	}
	return testlong.Pick(short, def, long)
}

// TestSIGKILL runs a child process that appends and flushes, kills it with
// SIGKILL at a random moment, and checks that every event the child
// reported flushed is in the reopened store, intact, and that nothing but
// the child's own events is there. Each round continues the same store.
//
// 40 rounds (a few seconds; 20 with -short, 200 with SEGLOG_LONG=1;
// SEGLOG_SIGKILL_ROUNDS=n: n). Each kills the child 20-140 ms in, in an
// append, a flush or a roll (the default run writes a few MiB: rolls of
// its 256 KiB segments).
func TestSIGKILL(t *testing.T) {
	rounds := sigkillRounds(t, 20, 40, 200)
	dir := t.TempDir()
	ctx := context.Background()
	acked := map[string]uint64{}
	for round := range rounds {
		cmd, stdout, stderr := startChildWriter(t, dir, round)
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Let it get going, then kill it at a random moment.
		wait := time.Duration(20+rand.IntN(120)) * time.Millisecond
		time.Sleep(wait)
		cmd.Process.Signal(syscall.SIGKILL)
		for line := range lines {
			if id, n, ok := parseAck(line); ok && n > acked[id] {
				acked[id] = n
			}
		}
		waitKilled(t, cmd, stderr, round)
		checkKilledStore(t, ctx, dir, acked, round)
	}
	var total uint64
	for _, n := range acked {
		total += n
	}
	t.Logf("%d SIGKILL rounds, %d events acknowledged and found intact", rounds, total)
}

// startChildWriter starts childWriter on the store in dir with the seed
// given: its stdout (the "ack" lines) and what it writes to stderr.
func startChildWriter(t *testing.T, dir string, seed int) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir, "SEGLOG_SIGKILL_SEED="+strconv.Itoa(seed))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout, stderr
}

// parseAck reads a line of childWriter: "ack <session> <events>" after a
// flush; ok is false for any other line.
func parseAck(line string) (id string, n uint64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ack" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return f[1], n, true
}

// waitKilled waits for a child and fails the test unless SIGKILL ended it.
func waitKilled(t *testing.T, cmd *exec.Cmd, stderr *strings.Builder, round int) {
	t.Helper()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("round %d: child ended with %v, not by SIGKILL: %s", round, err, stderr.String())
	}
}

func checkKilledStore(t *testing.T, ctx context.Context, dir string, acked map[string]uint64, round int) {
	t.Helper()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer db.Close()
	for _, id := range childSessions {
		h, err := db.Open(ctx, id, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) && acked[id] == 0 {
			continue
		}
		if err != nil {
			t.Fatalf("round %d: open %s: %v", round, id, err)
		}
		evs, err := h.Read(ctx, 0, -1)
		if err != nil {
			t.Fatalf("round %d: read %s: %v", round, id, err)
		}
		if uint64(len(evs)) < acked[id] {
			t.Fatalf("round %d: session %s has %d events, %d were acknowledged", round, id, len(evs), acked[id])
		}
		for i, e := range evs {
			if want := testgen.Event(uint64(i), childEventSize(uint64(i))); !sameEvent(e, want) {
				t.Fatalf("round %d: session %s event %d is not what the child wrote", round, id, i)
			}
		}
	}
}
