package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// wantOwner checks that err is an ErrAlreadyOwned that names this
// process as the holder, on this machine, since a moment in [from, to].
func wantOwner(t *testing.T, what string, err error, from, to time.Time) {
	t.Helper()
	var o *store.OwnedError
	if !errors.As(err, &o) || !errors.Is(err, store.ErrAlreadyOwned) {
		t.Fatalf("%s: %v, want a *store.OwnedError", what, err)
	}
	host, _ := os.Hostname()
	if o.PID != os.Getpid() || o.Host != host {
		t.Errorf("%s: holder pid %d on %q, want %d on %q", what, o.PID, o.Host, os.Getpid(), host)
	}
	if !from.IsZero() && (o.Since.Before(from.Truncate(time.Millisecond)) || o.Since.After(to)) {
		t.Errorf("%s: holder since %v, want within [%v, %v]", what, o.Since, from, to)
	}
	for _, want := range []string{"already owned by an active write handle", "process " + strconv.Itoa(os.Getpid()), "on host " + strconv.Quote(host)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %q lacks %q", what, err, want)
		}
	}
}

// A session whose lease another writing DB holds (as another process
// would: two DBs hold their byte locks apart) is refused naming the
// holder: pid, host and since when, as errors.As finds them; so is one a
// write handle of the same DB holds. Once the holder lets go, its record
// is gone and the session opens.
func TestOwnedErrorNamesTheHolder(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	before := time.Now()
	h, err := w1.Create(ctx, store.Header{ID: "held", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	appendFlushed(t, h, testgen.Events(0, 2, 50)...)

	_, err = w2.Open(ctx, "held", store.Write)
	wantOwner(t, "open for write in another DB", err, before, after)
	var se *store.SessionError
	if !errors.As(err, &se) || se.ID != "held" || se.Op != "open" || !strings.HasPrefix(err.Error(), `engine: session "held" already owned`) {
		t.Errorf("open for write in another DB: %v, want a SessionError of op open", err)
	}
	_, _, err = w2.Resume(ctx, "held")
	wantOwner(t, "resume in another DB", err, before, after)
	wantOwner(t, "delete in another DB", w2.Delete(ctx, "held"), before, after)
	_, err = w1.Open(ctx, "held", store.Write)
	wantOwner(t, "open for write in the holder's DB", err, before, after)

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if o := w2.ownedError("held", false); o.PID != 0 || o.Host != "" || !o.Since.IsZero() {
		t.Errorf("a holder is still named after the handle closed: %+v", o)
	}
	h2, err := w2.Open(ctx, "held", store.Write)
	if err != nil {
		t.Fatalf("open after the holder closed: %v", err)
	}
	h2.Close()
}

// A holder that did not record itself (its write failed) is refused as
// not recorded (by its own DB: as this process); a record that a dead process left is removed by the first
// process that opens the store again.
func TestOwnedErrorWithoutRecord(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	h, err := w1.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFlushed(t, h, testgen.Events(0, 1, 50)...)
	path := w1.holders.path
	if err := os.Remove(path); err != nil {
		t.Fatalf("the holder's file %s: %v", path, err)
	}
	_, err = w2.Open(ctx, "s", store.Write)
	var o *store.OwnedError
	if !errors.As(err, &o) || o.PID != 0 || o.Host != "" || !o.Since.IsZero() || !strings.Contains(err.Error(), "its holder is not recorded") {
		t.Errorf("open of a session whose holder left no record: %v (%+v)", err, o)
	}
	// The holder's own DB knows the holder is this process, record or not.
	_, err = w1.Open(ctx, "s", store.Write)
	wantOwner(t, "open for write in the holder's DB, no record", err, time.Time{}, time.Time{})
	h.Close()
	w1.Close()
	w2.Close()

	// A process that died holding a lease leaves its file (and the build
	// before left a record per lease).
	stale := filepath.Join(dir, holdersPrefix+"1-1")
	if err := os.WriteFile(stale, holderFile(1, "gone", coord.LeaseKey("x"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	older := filepath.Join(dir, leaseRecordPrefix+"00000000000000ff")
	if err := os.WriteFile(older, []byte(`{"id":"x","pid":1,"host":"gone","since":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	liveOpen(t, dir, nil)
	for _, f := range []string{stale, older} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("a dead holder's record survived the first open: %v", err)
		}
	}
}

// holderFile is a holder file of process pid on host naming the lease of
// key, taken at since (ms).
func holderFile(pid int, host string, key uint64, since int64) []byte {
	b := make([]byte, holdersHead+2*holderSlotSize)
	copy(b, holdersMagic)
	binary.LittleEndian.PutUint64(b[8:], uint64(pid))
	binary.LittleEndian.PutUint16(b[16:], uint16(len(host)))
	copy(b[18:], host)
	binary.LittleEndian.PutUint64(b[holdersHead+holderSlotSize:], key|holderUsed)
	binary.LittleEndian.PutUint64(b[holdersHead+holderSlotSize+8:], uint64(since))
	return b
}

// A process that died while others keep the store open leaves its holder
// file, naming the lease it held later than the live holder took it (a
// clock that moved back, or a record of an older build): the refused
// process names the live holder, and removes the dead one's file. A file
// of another host is believed (its processes cannot be asked), the latest
// taking wins.
func TestOwnedErrorSkipsDeadHolders(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	before := time.Now()
	h, err := w1.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	defer h.Close()
	appendFlushed(t, h, testgen.Events(0, 1, 50)...)

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	later := time.Now().Add(time.Hour).UnixMilli()
	stale := filepath.Join(dir, holdersPrefix+"dead")
	if err := os.WriteFile(stale, holderFile(dead.Process.Pid, host, coord.LeaseKey("s"), later), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = w2.Open(ctx, "s", store.Write)
	wantOwner(t, "open beside a dead holder's file", err, before, after)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead holder's file survived a refusal that read it: %v", err)
	}

	elsewhere := filepath.Join(dir, holdersPrefix+"elsewhere")
	if err := os.WriteFile(elsewhere, holderFile(dead.Process.Pid, "another-host", coord.LeaseKey("s"), later), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = w2.Open(ctx, "s", store.Write)
	var o *store.OwnedError
	if !errors.As(err, &o) || o.PID != dead.Process.Pid || o.Host != "another-host" || o.Since.UnixMilli() != later {
		t.Errorf("open beside another host's later record: %v (%+v)", err, o)
	}
}

// Each lease a DB holds has a slot of its own, reused once let go: with
// several held and some let go, every one still held is named, and none
// let go is.
func TestOwnedErrorSlots(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	hs := map[string]*Handle{}
	for _, id := range []string{"a", "b", "c", "d"} {
		h, err := w1.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		appendFlushed(t, h, testgen.Events(0, 1, 50)...)
		hs[id] = h
	}
	for _, id := range []string{"b", "d"} {
		if err := hs[id].Close(); err != nil {
			t.Fatal(err)
		}
		delete(hs, id)
	}
	h, err := w1.Open(ctx, "b", store.Write) // takes a slot let go
	if err != nil {
		t.Fatal(err)
	}
	hs["b"] = h
	for _, id := range []string{"a", "b", "c", "d"} {
		o := w2.ownedError(id, false)
		if _, held := hs[id]; held != (o.PID == os.Getpid()) {
			t.Errorf("session %s (held %v): holder %+v", id, held, o)
		}
	}
	for _, h := range hs {
		h.Close()
	}
}

// Slots let go are reused one lease each: a DB that takes, lets go and
// takes again several leases at once (several slots on its free list)
// gives every lease it holds a slot of its own, so that another DB
// refused any of them is told this process, and when it took that lease;
// one let go is named by nobody. A slot reused without being taken off
// the free list would be shared by the next leases, the last one's key
// in it: the others refused naming nobody.
func TestOwnedErrorSlotsReused(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	type held struct {
		h             *Handle
		before, after time.Time
	}
	hs := map[string]*held{}
	take := func(id string) {
		t.Helper()
		before := time.Now()
		var h *Handle
		var err error
		if _, ok := hs[id]; ok {
			t.Fatalf("%s taken twice", id)
		}
		if h, err = w1.Open(ctx, id, store.Write); errors.Is(err, store.ErrSessionNotFound) {
			h, err = w1.Create(ctx, store.Header{ID: id, CreatedAt: 1})
			if err == nil {
				appendFlushed(t, h, testgen.Events(0, 1, 50)...)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		hs[id] = &held{h, before, time.Now()}
	}
	let := func(id string) {
		t.Helper()
		if err := hs[id].h.Close(); err != nil {
			t.Fatal(err)
		}
		delete(hs, id)
	}
	check := func(round string) {
		t.Helper()
		slots := map[int]string{}
		for id, x := range hs {
			s := x.h.lease.slot
			if s < 0 {
				t.Fatalf("%s: %s holds no slot", round, id)
			}
			if other, ok := slots[s]; ok {
				t.Errorf("%s: %s and %s share slot %d", round, id, other, s)
			}
			slots[s] = id
			_, err := w2.Open(ctx, id, store.Write)
			wantOwner(t, round+": open of "+id+" in another DB", err, x.before, x.after)
		}
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			if _, ok := hs[id]; ok {
				continue
			}
			if o := w2.ownedError(id, false); o.PID != 0 || o.Host != "" || !o.Since.IsZero() {
				t.Errorf("%s: %s, let go, is named held by %+v", round, id, o)
			}
		}
	}
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		take(id)
	}
	check("all taken")
	for _, id := range []string{"b", "d", "f"} {
		let(id)
	}
	check("three let go")
	for _, id := range []string{"d", "f", "b"} {
		take(id)
	}
	check("three taken again")
	for _, id := range []string{"a", "c", "e"} {
		let(id)
	}
	take("e")
	take("a")
	check("two of three others taken again")
	for id := range hs {
		let(id)
	}
	check("all let go")
}
