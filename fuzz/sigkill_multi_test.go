package fuzz

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// The SIGKILL campaign of several processes on one store (issue 17): three
// writer processes and one reader process (this test binary, re-executed)
// work on one store while the parent kills one of them at a time with
// SIGKILL, at a random moment, right after an acknowledged flush, or while
// it compacts (beside the other writers, or alone), and starts a
// replacement. Writer slot k owns the sessions "w<k>-0".."w<k>-3": its
// process (and, after a kill, the next one in the slot) opens them for
// write, continues each from what is stored, deletes and creates them
// again, calls Compact (which fails with ErrLocked only while another
// process compacts), and now and then RebuildIndex (check --repair) beside
// the others, and forks its sessions (beside their write handles: the
// forks share their frames) into "w<k>-f0".."w<k>-f2", or deletes those.
// The parent checks after
// every kill, with a read-only open of its own, that every acknowledged
// event is there, intact and in order; the reader checks the same of every
// flush the parent forwards to it, and that what it reads never goes back.
// At the end every process is killed, Check finds no problem, and a write
// open finds every acknowledged event.
//
// A session's incarnation is named by its header's CreatedAt (its
// "generation": the number of the child that created it times a million
// plus a count), and its events are a pure function of (ID, generation,
// seq), so every byte read is checked, and an event of another incarnation
// never passes for one of this.

const (
	multiDirEnv   = "SEGLOG_SIGKILL_MULTI_DIR"
	multiRoleEnv  = "SEGLOG_SIGKILL_MULTI_ROLE"  // "w<slot>" or "r"
	multiStartEnv = "SEGLOG_SIGKILL_MULTI_START" // the child's number: seed and generations
	multiWriters  = 3
	multiSessions = 4 // per writer slot
)

// multiOptions are every process's options: small segments (rolls are
// frequent), an index checkpoint every few milliseconds, the background
// compactor every 20 ms.
func multiOptions() *engine.Options {
	return &engine.Options{
		SegmentSize:       64 << 10,
		IndexInterval:     3 * time.Millisecond,
		CompactInterval:   20 * time.Millisecond,
		WriteBehindWindow: 2 * time.Millisecond,
	}
}

func multiID(slot, j int) string { return fmt.Sprintf("w%d-%d", slot, j) }

// multiEvent is event seq of incarnation gen of session id. Most are 100
// B-1 KB; one in six is a few bytes, one in 40 a tool result of 16-64
// KiB and one in 160 one of 256 KiB-1 MiB (larger than a segment: the
// store rolls to fit it, and the dictionary trainer sees it in the
// frames it samples).
func multiEvent(id string, gen int64, seq uint64) event.Event {
	key := id + "@" + strconv.FormatInt(gen, 10)
	e := mixEvent(key, seq)
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", key, seq)
	v := h.Sum64()
	var size int
	switch v % 160 {
	case 0:
		size = 256<<10 + int(v>>8%(768<<10))
	case 1, 2, 3, 4:
		size = 16<<10 + int(v>>8%(48<<10))
	case 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27:
		e.Data = json.RawMessage(fmt.Sprintf(`{"s":%q,"turn":%d}`, key, seq))
		return e
	default:
		return e
	}
	ck := key + "/" + strconv.FormatUint(seq, 10)
	multiBig.Lock()
	data, ok := multiBig.data[ck]
	multiBig.Unlock()
	if !ok {
		big := testgen.Event(seq, size)
		data = json.RawMessage(fmt.Sprintf(`{"session":%q,%s`, key, big.Data[1:]))
		multiBig.Lock()
		if multiBig.bytes += len(data); multiBig.data == nil || multiBig.bytes > 64<<20 {
			multiBig.data, multiBig.bytes = map[string]json.RawMessage{}, len(data)
		}
		multiBig.data[ck] = data
		multiBig.Unlock()
	}
	e.Data = data
	return e
}

// multiBig keeps the Data of multiEvent's large events (making them took
// most of the checks' time: every check makes every event it compares),
// up to 64 MiB, then starts over. Callers only read it.
var multiBig struct {
	sync.Mutex
	data  map[string]json.RawMessage
	bytes int
}

// multiFork describes a fork the campaign made: its header's
// AgentPreset is "fork <parent generation>", its parent is ParentSession
// and its cut InheritedEventCount. Nil for a session of its own.
type multiFork struct {
	parent string
	gen    int64 // the parent's
	cut    uint64
}

// multiForkOf returns what h's header says of a fork, or nil.
func multiForkOf(h *engine.Handle) *multiFork {
	hdr := h.Header()
	var gen int64
	if _, err := fmt.Sscanf(hdr.AgentPreset, "fork %d", &gen); err != nil || !hdr.IsSeeded {
		return nil
	}
	return &multiFork{parent: hdr.ParentSession, gen: gen, cut: h.InheritedEventCount()}
}

// multiWant is event seq of incarnation gen of id: a fork's first events
// are its parent's, then its marker.
func multiWant(id string, gen int64, fk *multiFork, seq uint64) (event.Event, bool) {
	switch {
	case fk == nil || seq > fk.cut:
		return multiEvent(id, gen, seq), true
	case seq < fk.cut:
		return multiEvent(fk.parent, fk.gen, seq), true
	}
	return event.Event{}, false // the marker
}

// multiCheckLog returns what is wrong with evs, read from offset from of
// incarnation gen of session id (a fork if fk is not nil), or "".
func multiCheckLog(id string, gen int64, fk *multiFork, from int, evs []event.Event) string {
	for i, e := range evs {
		seq := uint64(from + i)
		want, ok := multiWant(id, gen, fk, seq)
		if !ok {
			if e.Seq != seq || !store.IsInheritedMarker(&e) {
				return fmt.Sprintf("event %d of fork %s generation %d is not its seed marker: %s %s", seq, id, gen, e.Type, e.Data)
			}
			continue
		}
		if !sameEvent(e, want) {
			data := string(e.Data)
			if len(data) > 40 {
				data = data[:40] + "…"
			}
			return fmt.Sprintf("event %d (of %d read from %d) of %s generation %d is not what its writer wrote (seq %d, data %s)", seq, len(evs), from, id, gen, e.Seq, data)
		}
	}
	return ""
}

// multiStaleEnv makes reads through a handle whose incarnation was deleted
// meanwhile count as failures (see multiRead).
const multiStaleEnv = "SEGLOG_SIGKILL_MULTI_STRICT"

// multiReadResult is a read of a session through a handle.
type multiReadResult struct {
	gen      int64 // the handle's incarnation
	n        int   // events: from + those read
	read     int   // events read
	gone     bool  // ErrSessionNotFound
	problem  string
	stale    bool // problem is the known engine bug (see multiRead)
	evsFirst uint64
}

// multiRead reads id through h from offset from and checks every event.
//
// A problem of a read whose incarnation is no longer the session's
// current one (a fresh Open of id finds another or none) is marked stale:
// the engine once served such reads wrong (TestStaleReadHandleAfterCompaction).
// They fail the campaign like any other problem, unless
// SEGLOG_SIGKILL_MULTI_STRICT=0 counts them apart.
func multiRead(ctx context.Context, db *engine.DB, h *engine.Handle, id string, from int) multiReadResult {
	res := multiReadResult{gen: h.Header().CreatedAt}
	evs, err := h.Read(ctx, from, -1)
	switch {
	case errors.Is(err, store.ErrSessionNotFound):
		res.gone = true
		return res
	case err != nil:
		res.problem = fmt.Sprintf("read %s generation %d from %d: %v", id, res.gen, from, err)
	default:
		res.problem = multiCheckLog(id, res.gen, multiForkOf(h), from, evs)
	}
	res.read, res.n = len(evs), from+len(evs)
	if res.problem != "" && os.Getenv(multiStaleEnv) == "0" {
		cur, err := db.Open(ctx, id, store.Read)
		switch {
		case errors.Is(err, store.ErrSessionNotFound):
			res.stale = true
		case err == nil:
			res.stale = cur.Header().CreatedAt != res.gen
			cur.Close()
		}
	}
	return res
}

// multiChild runs the child named by the environment; it returns only on
// a failure to start.
func multiChild(dir string) int {
	start, err := strconv.ParseInt(os.Getenv(multiStartEnv), 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: bad", multiStartEnv)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		outMu.Unlock()
	}
	role := os.Getenv(multiRoleEnv)
	if role == "r" {
		return multiReader(dir, start, say)
	}
	slot, err := strconv.Atoi(strings.TrimPrefix(role, "w"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: bad", multiRoleEnv)
		return 2
	}
	return multiWriter(dir, slot, start, say)
}

type multiSession struct {
	id      string
	h       *engine.Handle
	gen     int64
	next    uint64 // events in the session (appended)
	flushed bool   // this process flushed some of them
}

// multiWriter is writer slot's child. Lines it prints:
//
//	ready            the store is open
//	ack <id> <gen> <n>   a Flush returned nil: incarnation gen of id holds n events durably
//	delete <id> <gen>    before Delete (the session may be gone from here on)
//	deleted <id> <gen>   Delete returned nil
//	compacting / compacted / compact-locked   around Compact
//	err <op> <id>: …     an operation failed that should not have
func multiWriter(dir string, slot int, start int64, say func(string, ...any)) int {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(uint64(start), 17))
	db, err := enginetest.OpenUnchecked("a writer process the parent SIGKILLs; the parent checks the store (engine.Check)", dir, multiOptions())
	if err != nil {
		say("err open -: %v", err)
		fmt.Fprintln(os.Stderr, "child open:", err)
		return 2
	}
	say("ready")
	made := int64(0)
	fail := func(op, id string, err error) {
		say("err %s %s: %v", op, id, err)
		fmt.Fprintf(os.Stderr, "writer %d: %s %s: %v\n", slot, op, id, err)
	}
	ss := make([]*multiSession, multiSessions)
	for j := range ss {
		ss[j] = &multiSession{id: multiID(slot, j)}
	}
	// open makes s's write handle: the stored session continued, or a
	// new incarnation.
	open := func(s *multiSession) bool {
		h, err := db.Open(ctx, s.id, store.Write)
		if errors.Is(err, store.ErrSessionNotFound) {
			made++
			gen := start*1_000_000 + made
			say("create %s %d", s.id, gen)
			h, err = db.Create(ctx, store.Header{ID: s.id, CreatedAt: gen})
			if errors.Is(err, store.ErrSessionExists) {
				// A killed predecessor placed the session's first frames
				// and never flushed them; Create's catch-up made them
				// durable (a crash may keep what was appended): it exists
				// after all. The next try opens it.
				say("create-exists %s", s.id)
				return false
			}
			if err != nil {
				fail("create", s.id, err)
				return false
			}
			s.h, s.gen, s.next, s.flushed = h, gen, 0, false
			return true
		}
		if err != nil {
			fail("open", s.id, err)
			return false
		}
		evs, err := h.Read(ctx, 0, -1)
		if err != nil {
			h.Close()
			fail("read-own", s.id, err)
			return false
		}
		gen := h.Header().CreatedAt
		if p := multiCheckLog(s.id, gen, nil, 0, evs); p != "" {
			h.Close()
			fail("read-own", s.id, errors.New(p))
			return false
		}
		s.h, s.gen, s.next, s.flushed = h, gen, uint64(len(evs)), false
		return true
	}
	closeH := func(s *multiSession) {
		if err := s.h.Close(); err != nil {
			fail("close", s.id, err)
		}
		s.h = nil
	}
	for {
		s := ss[r.IntN(len(ss))]
		if s.h == nil && !open(s) {
			time.Sleep(time.Millisecond)
			continue
		}
		switch x := r.IntN(100); {
		case x < 80:
			// Mostly a turn's few events; now and then a bulk load: two
			// batches of ~40 KiB, each filling a frame, so that Append
			// writes them out behind itself and a kill can land there.
			n, batches := 1+r.IntN(3), 1
			if r.IntN(25) == 0 {
				n, batches = 80, 2
			}
			appended := true
			for range batches {
				evs := make([]event.Event, n)
				for i := range evs {
					evs[i] = multiEvent(s.id, s.gen, s.next+uint64(i))
				}
				if err := s.h.Append(ctx, evs...); err != nil {
					fail("append", s.id, err)
					closeH(s)
					appended = false
					break
				}
				s.next += uint64(len(evs))
			}
			if !appended {
				continue
			}
			if err := s.h.Flush(ctx); err != nil {
				fail("flush", s.id, err)
				closeH(s)
				continue
			}
			s.flushed = true
			say("ack %s %d %d", s.id, s.gen, s.next)
		case x < 86:
			// The lease changes hands within the process.
			closeH(s)
		case x < 91:
			if !s.flushed {
				continue
			}
			closeH(s)
			say("delete %s %d", s.id, s.gen)
			if err := db.Delete(ctx, s.id); err != nil {
				fail("delete", s.id, err)
				continue
			}
			say("deleted %s %d", s.id, s.gen)
		case x == 91 && r.IntN(10) == 0:
			// check --repair beside the others (a second DB: another
			// process as far as the locks go); now and then only.
			say("repairing")
			switch err := engine.RebuildIndex(dir, multiOptions()); {
			case errors.Is(err, store.ErrLocked):
				say("repair-locked")
			case err != nil:
				fail("repair", "-", err)
			default:
				say("repaired")
			}
		case x == 92 || x == 93:
			// Fork one of this slot's sessions, at a random flushed
			// point, beside its own write handle (or delete a fork).
			fid := fmt.Sprintf("w%d-f%d", slot, r.IntN(3))
			if st, err := db.Stat(ctx, fid); err == nil {
				say("delete %s %d", fid, st.Header.CreatedAt)
				if err := db.Delete(ctx, fid); err != nil {
					fail("delete", fid, err)
					continue
				}
				say("deleted %s %d", fid, st.Header.CreatedAt)
				continue
			} else if !errors.Is(err, store.ErrSessionNotFound) {
				fail("stat", fid, err)
				continue
			}
			if !s.flushed {
				continue
			}
			n := uint64(r.IntN(int(s.next) + 1))
			made++
			gen := start*1_000_000 + made
			say("fork %s %d %s %d %d", fid, gen, s.id, s.gen, n)
			c, err := db.Fork(ctx, s.id, n, store.Header{ID: fid, CreatedAt: gen, AgentPreset: fmt.Sprintf("fork %d", s.gen)})
			if errors.Is(err, store.ErrSessionExists) {
				continue // a killed predecessor's fork, made durable by this one's catch-up
			}
			if err != nil {
				fail("fork", fid, err)
				continue
			}
			say("ack %s %d %d", fid, gen, n+1)
			evs, err := c.Read(ctx, 0, -1)
			if err != nil {
				fail("read-fork", fid, err)
			} else if p := multiCheckLog(fid, gen, &multiFork{parent: s.id, gen: s.gen, cut: n}, 0, evs); p != "" || uint64(len(evs)) != n+1 {
				fail("read-fork", fid, fmt.Errorf("%d events: %s", len(evs), p))
			}
			c.Close()
		case x < 96:
			say("compacting")
			rep, err := db.Compact(ctx, engine.CompactOptions{
				LiveRatio: []float64{0.3, 0.6, 0.9, 1}[r.IntN(4)], Roll: r.IntN(2) == 0})
			switch {
			case errors.Is(err, store.ErrLocked):
				say("compact-locked")
			case err != nil:
				fail("compact", "-", err)
			default:
				say("compacted %d %d", len(rep.Dropped), len(rep.Rewritten))
			}
		default:
			// Read another writer's session: intact, whatever its length.
			id := multiID(r.IntN(multiWriters), r.IntN(multiSessions))
			h, err := db.Open(ctx, id, store.Read)
			if errors.Is(err, store.ErrSessionNotFound) {
				continue
			}
			if err != nil {
				fail("open-read", id, err)
				continue
			}
			if res := multiRead(ctx, db, h, id, 0); res.stale {
				say("stale %s", res.problem)
			} else if res.problem != "" {
				fail("read", id, errors.New(res.problem))
			}
			h.Close()
		}
	}
}

// multiReader is the reader child. It reads lines "ack <id> <gen> <n>" and
// "delete <id> <gen>" that the parent forwards from the writers on stdin:
// a read of the session started after the ack must find at least n events
// of incarnation gen (or a later incarnation, or none once the session's
// owner deleted it). Between them it reads every session, also through
// Handle.Wait: the events read must be intact, and a session must never
// go back (to an earlier incarnation or fewer events). It prints "ready",
// "checked <id> <n>" after each ack it checked (the moment the parent's
// "ack" kill of the reader waits for), "bad <what>" for each violation
// and "stats <acks checked> <reads>" now and then.
func multiReader(dir string, start int64, say func(string, ...any)) int {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(uint64(start), 23))
	db, err := enginetest.OpenUnchecked("a reader process of a store the parent checks (engine.Check)", dir, &engine.Options{ReadOnly: true})
	if err != nil {
		say("err open -: %v", err)
		fmt.Fprintln(os.Stderr, "reader open:", err)
		return 2
	}
	say("ready")
	lines := make(chan string, 1<<16)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	type seen struct {
		gen int64
		n   int
		by  string
	}
	last := map[string]seen{}
	// absent: the generation an ack named that a read after the ack did
	// not find; its owner must delete it before it goes on with another
	// (the reader may lag, so the delete may have come before the read).
	absent := map[string]int64{}
	bad := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		say("bad %s", msg)
		fmt.Fprintln(os.Stderr, "reader:", msg)
	}
	// observe records a read of id: incarnation gen, n events.
	observe := func(id string, gen int64, n int, by string) {
		l, ok := last[id]
		switch {
		case ok && gen < l.gen:
			bad("%s went back from generation %d (%s) to %d (%s)", id, l.gen, l.by, gen, by)
		case ok && gen == l.gen && n < l.n:
			bad("%s generation %d went back from %d events (%s) to %d (%s)", id, gen, l.n, l.by, n, by)
		}
		if !ok || gen > l.gen || (gen == l.gen && n > l.n) {
			last[id] = seen{gen, n, by}
		}
	}
	stale := 0
	// result takes a read's outcome: false if there is nothing more to
	// learn from it.
	result := func(id string, res multiReadResult, by string) bool {
		switch {
		case res.gone:
			return false
		case res.stale:
			stale++
			say("stale %s", res.problem)
			return false
		case res.problem != "":
			bad("%s (%s)", res.problem, by)
			return false
		}
		return true
	}
	checkAck := func(id string, gen int64, n uint64) {
		if g, ok := absent[id]; ok && g != gen {
			bad("%s generation %d was not there at a read after an ack, and its owner did not delete it (it went on with generation %d)", id, g, gen)
			delete(absent, id)
		}
		h, err := db.Open(ctx, id, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) {
			absent[id] = gen
			return
		}
		if err != nil {
			bad("open %s after its ack: %v", id, err)
			return
		}
		defer h.Close()
		hg := h.Header().CreatedAt
		if hg < gen {
			bad("%s: generation %d was acknowledged, a read after it found generation %d", id, gen, hg)
			return
		}
		from := int(n) - 1
		if hg != gen {
			from = 0 // a later incarnation
		}
		res := multiRead(ctx, db, h, id, from)
		if res.gone {
			absent[id] = gen
			return
		}
		if !result(id, res, "a read after an ack") {
			return
		}
		if hg == gen && res.n < int(n) {
			bad("%s generation %d: %d events were acknowledged, a read started after the ack found %d", id, gen, n, res.n)
		}
		if res.read > 0 || from == 0 {
			observe(id, hg, res.n, "read after an ack")
		}
	}
	readAll := func(id string) {
		h, err := db.Open(ctx, id, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) {
			return
		}
		if err != nil {
			bad("open %s: %v", id, err)
			return
		}
		defer h.Close()
		res := multiRead(ctx, db, h, id, 0)
		if !result(id, res, "read") {
			return
		}
		observe(id, res.gen, res.n, "read")
		if r.IntN(8) != 0 {
			return
		}
		// Follow it a little.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		n, err := h.Wait(wctx, uint64(res.n))
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrSessionNotFound) {
				bad("wait %s: %v", id, err)
			}
			return
		}
		more := multiRead(ctx, db, h, id, res.n)
		if !result(id, more, "read after Wait") {
			return
		}
		if more.n < int(n) {
			if cur, err := db.Open(ctx, id, store.Read); err == nil && cur.Header().CreatedAt == res.gen {
				cur.Close()
				bad("%s generation %d: Wait said %d events, a read after it found %d", id, res.gen, n, more.n)
			} else if err == nil {
				cur.Close()
			}
		}
		observe(id, res.gen, more.n, "read after wait")
	}
	acks, reads := 0, 0
	for {
		for handled := 0; handled < 200; handled++ {
			var line string
			select {
			case line = <-lines:
			default:
			}
			if line == "" {
				break
			}
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			gen, _ := strconv.ParseInt(f[2], 10, 64)
			switch f[0] {
			case "ack":
				n, _ := strconv.ParseUint(f[3], 10, 64)
				checkAck(f[1], gen, n)
				acks++
				say("checked %s %d", f[1], n)
			case "delete":
				if absent[f[1]] == gen {
					delete(absent, f[1])
				}
			}
		}
		snaps, err := db.List(ctx)
		if err != nil {
			bad("list: %v", err)
			continue
		}
		if len(snaps) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		s := snaps[r.IntN(len(snaps))]
		observe(s.Header.ID, s.Header.CreatedAt, int(s.EventCount), "list")
		readAll(s.Header.ID)
		reads++
		if reads%100 == 0 {
			say("stats %d %d %d", acks, reads, stale)
		}
	}
}

// multiFacts is what the parent knows of one session from the writers'
// lines (and, for sessions of a dead writer, from what a read after its
// death found: a dead process's durable frames stay).
type multiFacts struct {
	gen      int64 // the latest incarnation known; 0 none
	acked    int64 // events of gen known durable; -1 none
	deleting bool  // Delete of gen called: it may be gone
	deleted  bool  // Delete of gen acknowledged
}

// multiProc is a running child.
type multiProc struct {
	role   string // "w0".."w2", "r"
	start  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	ready  chan struct{}
	done   chan struct{} // its stdout is read to the end
	note   chan string   // "ack" and "compacting" lines, for kills timed on them (lossy)
	fwd    chan string   // reader: lines to forward to its stdin
	mu     sync.Mutex
	last   string // its last line
}

type multiRun struct {
	t     *testing.T
	dir   string
	mu    sync.Mutex
	facts map[string]*multiFacts
	probs []string
	// reader is the running reader (nil between one and the next).
	reader  *multiProc
	starts  int
	history []string
	acks    int
	stats   string
	stale   int // reads that met the known engine bug (multiRead)
	// compactions that removed or rewrote segments, and of those the
	// ones beside other live writers (as the compactor's line says)
	compactions, beside int
	repairs             int                 // RebuildIndex calls that returned nil
	forks               int                 // Fork calls (of a writer's own session, beside its write handle)
	writers             map[*multiProc]bool // started and not killed yet
}

func (m *multiRun) problem(format string, args ...any) {
	m.mu.Lock()
	m.probs = append(m.probs, fmt.Sprintf(format, args...))
	m.mu.Unlock()
}

func (m *multiRun) log(format string, args ...any) {
	m.history = append(m.history, fmt.Sprintf(format, args...))
}

// apply takes a line of writer p.
func (m *multiRun) apply(p *multiProc, line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if f[0] == "stale" {
		m.stale++
		return
	}
	if f[0] == "fork" {
		m.forks++
		return
	}
	if f[0] == "err" {
		m.probs = append(m.probs, fmt.Sprintf("writer %s (child %d): %s", p.role, p.start, strings.TrimPrefix(line, "err ")))
		return
	}
	if len(f) < 3 || (f[0] != "ack" && f[0] != "delete" && f[0] != "deleted") {
		return
	}
	id := f[1]
	gen, _ := strconv.ParseInt(f[2], 10, 64)
	s := m.facts[id]
	if s == nil {
		s = &multiFacts{acked: -1}
		m.facts[id] = s
	}
	if gen < s.gen {
		m.probs = append(m.probs, fmt.Sprintf("writer %s (child %d) wrote generation %d of %s, generation %d was known before: %q", p.role, p.start, gen, id, s.gen, line))
		return
	}
	if gen > s.gen {
		*s = multiFacts{gen: gen, acked: -1}
	}
	switch f[0] {
	case "ack":
		n, _ := strconv.ParseInt(f[3], 10, 64)
		s.acked = max(s.acked, n)
		s.deleting, s.deleted = false, false
		m.acks++
	case "delete":
		s.deleting = true
	case "deleted":
		*s = multiFacts{gen: gen, acked: -1, deleted: true}
	}
	if f[0] != "deleted" && m.reader != nil {
		m.reader.fwd <- line
	}
}

func (m *multiRun) snapshot() map[string]multiFacts {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]multiFacts, len(m.facts))
	for id, f := range m.facts {
		out[id] = *f
	}
	return out
}

// start starts a child in role.
func (m *multiRun) start(role string) *multiProc {
	t := m.t
	m.starts++
	p := &multiProc{role: role, start: m.starts, stderr: &tailBuffer{max: 4 << 10},
		ready: make(chan struct{}), done: make(chan struct{}), note: make(chan string, 1)}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), multiDirEnv+"="+m.dir, multiRoleEnv+"="+role, multiStartEnv+"="+strconv.Itoa(p.start))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if role == "r" {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		p.fwd = make(chan string, 1<<16)
	}
	cmd.Stderr = p.stderr
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if role != "r" {
		m.mu.Lock()
		m.writers[p] = true
		m.mu.Unlock()
	}
	if p.fwd != nil {
		go func() {
			w := bufio.NewWriter(p.stdin)
			broken := false
			for line := range p.fwd {
				if broken {
					continue
				}
				w.WriteString(line)
				w.WriteByte('\n')
				if len(p.fwd) == 0 {
					broken = w.Flush() != nil
				}
			}
		}()
		m.mu.Lock()
		m.reader = p
		m.mu.Unlock()
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		first := true
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.last = line
			p.mu.Unlock()
			if line == "ready" && first {
				close(p.ready)
				first = false
				continue
			}
			if role == "r" {
				switch {
				case strings.HasPrefix(line, "bad "), strings.HasPrefix(line, "err "):
					m.problem("reader (child %d): %s", p.start, line)
				case strings.HasPrefix(line, "stale "):
					m.mu.Lock()
					m.stale++
					m.mu.Unlock()
				case strings.HasPrefix(line, "stats "):
					m.mu.Lock()
					m.stats = line
					m.mu.Unlock()
				case strings.HasPrefix(line, "checked "):
					select {
					case p.note <- line:
					default:
					}
				}
				continue
			}
			m.apply(p, line)
			var dropped, rewritten int
			if n, _ := fmt.Sscanf(line, "compacted %d %d", &dropped, &rewritten); n == 2 && dropped+rewritten > 0 {
				m.mu.Lock()
				m.compactions++
				if len(m.writers) > 1 {
					m.beside++
				}
				m.mu.Unlock()
			}
			if line == "repaired" {
				m.mu.Lock()
				m.repairs++
				m.mu.Unlock()
			}
			if strings.HasPrefix(line, "ack ") || line == "compacting" {
				select {
				case p.note <- line:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	return p
}

// kill kills p with SIGKILL and waits until it is gone and its lines are
// read; it returns what p was doing (its last line).
func (m *multiRun) kill(p *multiProc) string {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	m.mu.Lock()
	delete(m.writers, p)
	m.mu.Unlock()
	err := p.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		m.problem("%s (child %d) ended with %v, not by SIGKILL; its stderr:\n%s", p.role, p.start, err, p.stderr.String())
	}
	if e := p.stderr.String(); strings.Contains(e, "DATA RACE") {
		m.problem("%s (child %d): the race detector reported:\n%s", p.role, p.start, e)
	}
	if p.fwd != nil {
		m.mu.Lock()
		if m.reader == p {
			m.reader = nil
		}
		close(p.fwd)
		m.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// verify checks the store through db: every session a fact names holds
// every event acknowledged of its incarnation (or a later incarnation; or
// is gone, if its delete was called), nothing comes back after an
// acknowledged delete, and every event read is intact. before holds the
// facts taken before db was opened. For the sessions of dead writers (dead
// names their slots; all when db is the final reopen), what db holds
// becomes the facts.
func (m *multiRun) verify(db *engine.DB, label string, before map[string]multiFacts, dead func(id string) bool) {
	ctx := context.Background()
	snaps, err := db.List(ctx)
	if err != nil {
		m.problem("%s: List: %v", label, err)
		return
	}
	type got struct {
		gen int64
		n   int
	}
	found := map[string]got{}
	for _, s := range snaps {
		id := s.Header.ID
		h, err := db.Open(ctx, id, store.Read)
		if errors.Is(err, store.ErrSessionNotFound) {
			continue // deleted since the List
		}
		if err != nil {
			m.problem("%s: open %s: %v", label, id, err)
			continue
		}
		res := multiRead(ctx, db, h, id, 0)
		h.Close()
		switch {
		case res.gone:
			continue
		case res.stale:
			m.mu.Lock()
			m.stale++
			m.mu.Unlock()
			continue
		case res.problem != "":
			m.problem("%s: %s", label, res.problem)
			continue
		}
		gen, n := res.gen, res.n
		found[id] = got{gen, n}
		f, ok := before[id]
		if !ok {
			continue
		}
		switch {
		case gen < f.gen:
			m.problem("%s: %s has generation %d (%d events); generation %d was acknowledged (%d events, deleting %v, deleted %v)", label, id, gen, n, f.gen, f.acked, f.deleting, f.deleted)
		case gen == f.gen && f.deleted:
			m.problem("%s: %s generation %d (%d events) is back after its Delete was acknowledged", label, id, gen, n)
		case gen == f.gen && int64(n) < f.acked:
			m.problem("%s: %s generation %d has %d events, %d were acknowledged", label, id, gen, n, f.acked)
		}
	}
	for id, f := range before {
		if _, ok := found[id]; ok || f.acked < 0 || f.deleting || f.deleted {
			continue
		}
		// Gone: fine if its owner (alive) has deleted it meanwhile;
		// its "delete" line may still be on the way.
		explained := false
		for wait := 0; wait < 100 && !explained; wait++ {
			now := m.snapshot()[id]
			explained = now.gen > f.gen || now.deleting || now.deleted
			if !explained {
				if dead(id) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if !explained {
			m.problem("%s: %s generation %d is gone, %d events were acknowledged and its owner did not delete it", label, id, f.gen, f.acked)
		}
	}
	// A dead writer's sessions: what is there now stays.
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, f := range m.facts {
		if !dead(id) {
			continue
		}
		g, ok := found[id]
		switch {
		case ok && g.gen > f.gen:
			*f = multiFacts{gen: g.gen, acked: int64(g.n)}
		case ok && g.gen == f.gen && !f.deleted:
			// (A Delete the dead writer began may still land: its
			// tombstone, placed and not yet synced, becomes durable with
			// any process's next fdatasync. deleting stays until a writer
			// acknowledges this generation again.)
			f.acked = max(f.acked, int64(g.n))
		case !ok && f.deleting:
			*f = multiFacts{gen: f.gen, acked: -1, deleted: true}
		}
	}
	for id, g := range found {
		if dead(id) && m.facts[id] == nil {
			m.facts[id] = &multiFacts{gen: g.gen, acked: int64(g.n)}
		}
	}
}

// verifyLive verifies the store with a read-only open of the parent's own,
// beside the running children.
func (m *multiRun) verifyLive(label string, dead func(id string) bool) {
	before := m.snapshot()
	db, err := enginetest.OpenStore(m.t, m.dir, &engine.Options{ReadOnly: true})
	if err != nil {
		m.problem("%s: read-only open: %v", label, err)
		return
	}
	m.verify(db, label, before, dead)
	if err := db.Close(); err != nil {
		m.problem("%s: close of the read-only open: %v", label, err)
	}
}

func (m *multiRun) problems() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.probs...)
}

// fail reports the problems with the kill history and a copy of the store,
// and ends the test.
func (m *multiRun) fail(round int) {
	t := m.t
	keep, err := os.MkdirTemp("", fmt.Sprintf("seglog-sigkill-multi-r%d-", round))
	where := keep
	if err == nil {
		if err := copyDir(m.dir, keep); err != nil {
			where = fmt.Sprintf("%s (copy failed: %v)", keep, err)
		}
	}
	hist := m.history
	if len(hist) > 30 {
		hist = hist[len(hist)-30:]
	}
	ps := m.problems()
	if len(ps) > 20 {
		ps = append(ps[:20], fmt.Sprintf("… and %d more", len(ps)-20))
	}
	t.Fatalf("round %d: %d problems:\n\t%s\nthe last kills:\n\t%s\nthe store after them: %s", round, len(m.problems()),
		strings.Join(ps, "\n\t"), strings.Join(hist, "\n\t"), where)
}

func multiSlotOf(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

// TestSIGKILLMulti is the campaign of three writer processes and a reader
// process on one store (see the top of this file). Each round kills one
// process with SIGKILL (a writer three times in four): after a random 0–30
// ms, right after its next acknowledged flush, one round in five a few
// milliseconds after it starts a compaction beside the other writers, and
// one round in five a writer left alone (the other two killed first)
// right after it starts a compaction or after a random while. After every
// kill the parent checks the store with
// a read-only open of its own and starts a replacement. The reader checks
// every flush the parent forwards to it. At the end: every process
// killed, Check finds no problem, a write open finds every acknowledged
// event, Check again after its Close.
//
// 20 rounds (a second or two each; 10 with -short, 200
// with SEGLOG_LONG=1; SEGLOG_SIGKILL_ROUNDS=n: n). The first four rounds
// are one of each kind (see the loop), so every run reaches them all.
//
// It found four engine bugs, each with its own test now: a read-only
// open that a compaction overtook failed instead of starting over
// (TestReadOnlyOpenDuringACompaction), a follower's read through a handle
// of a deleted incarnation (TestStaleReadHandleAfterCompaction), a
// session's first read that took another incarnation's frames from an
// index checkpointed since, and the same of a fork, which read its
// shared events from no frame once the index had dropped them with the
// fork and its parent (TestForkFirstReadAfterTheIndexMovedOn).
func TestSIGKILLMulti(t *testing.T) {
	rounds := sigkillRounds(t, 10, 20, 200)
	m := &multiRun{t: t, dir: t.TempDir(), facts: map[string]*multiFacts{}, writers: map[*multiProc]bool{}}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	var writers [multiWriters]*multiProc
	var reader *multiProc
	startWriter := func(k int) {
		writers[k] = m.start(fmt.Sprintf("w%d", k))
	}
	defer func() {
		for _, p := range append(writers[:], reader) {
			if p != nil && p.cmd.ProcessState == nil {
				p.cmd.Process.Signal(syscall.SIGKILL)
				p.cmd.Wait()
			}
		}
	}()
	startWriter(0)
	select {
	case <-writers[0].ready:
	case <-writers[0].done:
		t.Fatalf("the first writer ended: %s", writers[0].stderr.String())
	}
	for k := 1; k < multiWriters; k++ {
		startWriter(k)
	}
	reader = m.start("r")
	waitReady := func(p *multiProc) {
		select {
		case <-p.ready:
		case <-p.done:
		case <-time.After(10 * time.Second):
			m.problem("%s (child %d) not ready after 10s", p.role, p.start)
		}
	}
	for _, p := range writers {
		waitReady(p)
	}
	waitReady(reader)

	// killOne kills p at the moment how says and checks the store.
	var midCompact, afterAck, early int
	killOne := func(round int, p *multiProc, how string, slotDead bool) {
		var wait time.Duration
		switch how {
		case "delay":
			wait = time.Duration(rnd.IntN(31)) * time.Millisecond
			time.Sleep(wait)
		case "ack", "compacting":
			// Forget older notes: the next one.
			select {
			case <-p.note:
			default:
			}
			deadline := time.After(2 * time.Second)
		loop:
			for {
				select {
				case n := <-p.note:
					if how == "ack" || n == "compacting" {
						break loop
					}
				case <-deadline:
					break loop
				case <-p.done:
					break loop
				}
			}
			if how == "compacting" {
				wait = time.Duration(rnd.IntN(8)) * time.Millisecond
				time.Sleep(wait)
			}
		}
		select {
		case <-p.ready:
		default:
			early++
		}
		last := m.kill(p)
		switch {
		case last == "compacting":
			midCompact++
		case how == "ack" && (strings.HasPrefix(last, "ack ") || strings.HasPrefix(last, "checked ")):
			afterAck++
		}
		m.log("round %d: killed %s (child %d) %s %v, its last line %q", round, p.role, p.start, how, wait, last)
		label := fmt.Sprintf("round %d, after killing %s (child %d)", round, p.role, p.start)
		m.verifyLive(label, func(id string) bool { return slotDead && multiSlotOf(id) == p.role })
	}
	start := time.Now()
	// The first four rounds are one of each kind, in a random order, so
	// that the shortest run reaches every kind: the reader and a writer
	// killed right after an ack (the writer's replacement killed again
	// while it joins), a writer mid-compaction, a writer alone. Later
	// rounds draw the kind and the moment.
	first := rnd.Perm(4)
	for round := range rounds {
		hows := []string{"delay", "delay", "ack"}
		v := rnd.IntN(20)
		if round < len(first) {
			v, hows = []int{0, 5, 12, 16}[first[round]], []string{"ack"}
		}
		switch {
		case v < 5:
			// The reader.
			killOne(round, reader, hows[rnd.IntN(len(hows))], false)
			reader = m.start("r")
			waitReady(reader)
		case v < 12:
			k := rnd.IntN(multiWriters)
			killOne(round, writers[k], hows[rnd.IntN(len(hows))], true)
			startWriter(k)
			if rnd.IntN(8) == 0 || round < len(first) {
				// Again while it may still be joining the store.
				time.Sleep(time.Duration(rnd.IntN(15)) * time.Millisecond)
				killOne(round, writers[k], "delay", true)
				startWriter(k)
			}
		case v < 16:
			// Mid-compaction, beside the other writers.
			k := rnd.IntN(multiWriters)
			killOne(round, writers[k], "compacting", true)
			startWriter(k)
		default:
			// One writer left alone.
			k := rnd.IntN(multiWriters)
			for j := range writers {
				if j != k {
					killOne(round, writers[j], "delay", true)
				}
			}
			how := "compacting"
			if rnd.IntN(3) == 0 {
				how = "delay"
				time.Sleep(time.Duration(rnd.IntN(100)) * time.Millisecond)
			}
			killOne(round, writers[k], how, true)
			for j := range writers {
				startWriter(j)
			}
		}
		for _, p := range writers {
			waitReady(p)
		}
		if len(m.problems()) > 0 {
			m.fail(round)
		}
	}
	// The end: every process killed at once.
	for _, p := range writers {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	reader.cmd.Process.Signal(syscall.SIGKILL)
	for _, p := range append(writers[:], reader) {
		m.kill(p)
	}
	m.log("the end: killed all")
	all := func(string) bool { return true }
	if rep, err := engine.Check(m.dir, multiOptions()); err != nil {
		m.problem("check after the last kill: %v", err)
	} else {
		for _, p := range rep.Problems {
			m.problem("check after the last kill: %s", p)
		}
	}
	before := m.snapshot()
	db, err := enginetest.OpenStore(t, m.dir, multiOptions())
	if err != nil {
		m.problem("the final open: %v", err)
		m.fail(rounds)
	}
	m.verify(db, "the final open", before, all)
	if err := db.Close(); err != nil {
		m.problem("the final close: %v", err)
	}
	if rep, err := engine.Check(m.dir, multiOptions()); err != nil {
		m.problem("check after the final close: %v", err)
	} else {
		for _, p := range rep.Problems {
			m.problem("check after the final close: %s", p)
		}
	}
	if len(m.problems()) > 0 {
		m.fail(rounds)
	}
	// Count what the store holds.
	var sessions, events, deleted int64
	for _, f := range m.snapshot() {
		if f.deleted {
			deleted++
		} else if f.acked >= 0 {
			sessions++
			events += f.acked
		}
	}
	ids := make([]string, 0)
	for id := range m.snapshot() {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	dicts, _ := filepath.Glob(filepath.Join(m.dir, "*.dict"))
	t.Logf("%d rounds in %v, %d processes started; %d flushes acknowledged; kills: %d right after an ack, %d mid-compaction, %d before the open was done; %d compactions reclaimed segments, %d of them beside other writers; %d index rebuilds beside them; %d forks; at the end %d sessions with %d events, %d deleted, %d dictionaries; reader's last stats (acks checked, reads, stale): %q; reads that met the known stale-handle bug: %d",
		rounds, time.Since(start).Round(time.Millisecond), m.starts, m.acks, afterAck, midCompact, early, m.compactions, m.beside, m.repairs, m.forks, sessions, events, deleted, len(dicts), m.stats, m.stale)
}

// TestStaleReadHandleAfterCompaction is the engine bug the campaign meets
// (multiRead): a process that follows another (here a read-only DB beside
// a writing one: their locks are per open file, as two processes' are)
// holds a read handle of session "a"; the writer deletes "a" (and, in the
// second case, creates it again with events of the same size) and
// compacts, rewriting the segment. A Read through the old handle must
// fail with ErrSessionNotFound, as it does in the writing process; in the
// follower it returns the next incarnation's events (with a header
// saying CreatedAt 1), or a *CorruptionError at the old frame offsets.
// The follower's reload (engine/follow.go) replaces its sessions, and
// DB.current leaves a handle whose incarnation is gone on its old state:
// not erased, its frames where they were before the rewrite.
func TestStaleReadHandleAfterCompaction(t *testing.T) {
	ctx := context.Background()
	evsOf := func(gen int) []event.Event {
		evs := make([]event.Event, 3)
		for i := range evs {
			evs[i] = event.Event{Seq: uint64(i), Type: "assistant/message", Time: 1,
				Data: []byte(fmt.Sprintf(`{"text":"generation %d"}`, gen))}
		}
		return evs
	}
	for _, recreate := range []bool{true, false} {
		t.Run(fmt.Sprintf("recreated=%v", recreate), func(t *testing.T) {
			dir := t.TempDir()
			w, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1, Uncompressed: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			write := func(gen int) {
				h, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: int64(gen)})
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Append(ctx, evsOf(gen)...); err != nil {
					t.Fatal(err)
				}
				if err := h.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			}
			write(1)
			if !recreate {
				// Something alive, so the segment is rewritten.
				h, err := w.Create(ctx, store.Header{ID: "b", CreatedAt: 9})
				if err != nil {
					t.Fatal(err)
				}
				if err := h.Append(ctx, evsOf(9)...); err != nil {
					t.Fatal(err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
			}
			r, err := enginetest.OpenStore(t, dir, &engine.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ra, err := r.Open(ctx, "a", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			if evs, err := ra.Read(ctx, 0, -1); err != nil || len(evs) != 3 {
				t.Fatalf("before: %d events, %v", len(evs), err)
			}
			if err := w.Delete(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			if recreate {
				write(2)
			}
			if _, err := w.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
				t.Fatal(err)
			}
			evs, err := ra.Read(ctx, 0, -1)
			if !errors.Is(err, store.ErrSessionNotFound) {
				data := ""
				if len(evs) > 0 {
					data = string(evs[0].Data)
				}
				t.Errorf("a read through the handle of the deleted incarnation (CreatedAt %d): %d events (first %s), error %v; want ErrSessionNotFound", ra.Header().CreatedAt, len(evs), data, err)
			}
		})
	}
}
