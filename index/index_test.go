package index

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/seglog/seglog/internal/base"
)

func openTemp(t *testing.T) (*Index, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "index.db")
	x, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x, path
}

func sessions(t *testing.T, x *Index) []Session {
	t.Helper()
	var out []Session
	if err := x.Sessions(func(s Session) error { out = append(out, s); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApplyAndRead(t *testing.T) {
	x, path := openTemp(t)
	if cp, err := x.Checkpoint(); err != nil || cp != (Checkpoint{}) {
		t.Fatalf("empty checkpoint = %+v, %v", cp, err)
	}
	a := Session{ID: "a", Header: []byte(`{"id":"a"}`), UID: 1, Events: 5, Size: 100}
	ab := Session{ID: "ab", Header: []byte(`{"id":"ab"}`), UID: 2, Events: 1, Size: 10, Inherited: 1}
	fa := []Frame{{FirstSeq: 0, Count: 2, Segment: 1, Offset: 64, Size: 56}, {FirstSeq: 2, Count: 3, Segment: 2, Offset: 64, Size: 80}}
	fab := []Frame{{FirstSeq: 0, Count: 1, Segment: 1, Offset: 120, Size: 48}}
	u := &Update{Sessions: []Session{a, ab}, Checkpoint: Checkpoint{Segment: 2, Offset: 144}}
	for _, f := range fa {
		u.Frames = append(u.Frames, SessionFrame{"a", f})
	}
	u.Frames = append(u.Frames, SessionFrame{"ab", fab[0]})
	if err := x.Apply(u); err != nil {
		t.Fatal(err)
	}
	// Reopen: everything survived.
	x.Close()
	x, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if diff := cmp.Diff([]Session{a, ab}, sessions(t, x)); diff != "" {
		t.Errorf("Sessions mismatch (-want +got):\n%s", diff)
	}
	for id, want := range map[string][]Frame{"a": fa, "ab": fab, "b": nil} {
		got, err := x.Frames(id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Frames(%q) mismatch (-want +got):\n%s", id, diff)
		}
	}
	if cp, _ := x.Checkpoint(); cp != (Checkpoint{Segment: 2, Offset: 144}) {
		t.Errorf("checkpoint = %+v", cp)
	}
	if err := x.Apply(&Update{Checkpoint: Checkpoint{Segment: 2, Offset: 100}}); err == nil {
		t.Error("a checkpoint moving back was accepted")
	}
	// Deleting "a" leaves "ab" (a prefix of its key) alone.
	if err := x.Apply(&Update{Deleted: []string{"a"}, Checkpoint: Checkpoint{Segment: 2, Offset: 144}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := x.Frames("a"); len(got) != 0 {
		t.Errorf("frames of a deleted session remain: %+v", got)
	}
	if got, _ := x.Frames("ab"); len(got) != 1 {
		t.Errorf("delete of a removed frames of ab: %+v", got)
	}
	if got := sessions(t, x); len(got) != 1 || got[0].ID != "ab" {
		t.Errorf("sessions after delete: %+v", got)
	}
}

func TestNewerFormatRefused(t *testing.T) {
	x, path := openTemp(t)
	x.Close()
	db, err := bolt.Open(path, 0o644, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.LittleEndian.AppendUint16(nil, Version+1))
	})
	db.Close()
	_, err = Open(path, nil)
	var fe *base.FormatError
	if !errors.As(err, &fe) || !fe.Newer() || fe.Path != path {
		t.Errorf("Open of a newer index = %v, want *FormatError (newer) naming the path", err)
	}
}

func TestLockedByAnotherOpen(t *testing.T) {
	_, path := openTemp(t)
	if _, err := Open(path, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("second Open = %v, want ErrLocked", err)
	}
}

// Apply inserts the frames of an update grouped by session in key order
// (byKey); what it stores is the same as inserting them in log order: all
// of them, a session's frames by seq, and of two frames with one key the
// later one.
func TestApplyInterleavedFrames(t *testing.T) {
	x, err := Open(filepath.Join(t.TempDir(), "index"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	long := strings.Repeat("x", 200) // a 2-byte length prefix: keys order it before short IDs of larger first byte
	ids := []string{"b", "a", long, "c/1", "a/0"}
	var u Update
	want := map[string][]Frame{}
	off := int64(64)
	for seq := range uint64(30) {
		for _, id := range ids {
			f := Frame{FirstSeq: seq, Count: 1, Segment: 1, Offset: off, Size: 10}
			u.Frames = append(u.Frames, SessionFrame{ID: id, Frame: f})
			want[id] = append(want[id], f)
			off += 10
		}
	}
	// "a" seq 7 again, later in the log: this one is stored.
	again := Frame{FirstSeq: 7, Count: 1, Segment: 2, Offset: 64, Size: 10}
	u.Frames = append(u.Frames, SessionFrame{ID: "a", Frame: again})
	want["a"][7] = again
	u.Checkpoint = Checkpoint{Segment: 2, Offset: 74}
	if err := x.Apply(&u); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		got, err := x.Frames(id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want[id], got); diff != "" {
			t.Errorf("frames of %.10q (-want +got):\n%s", id, diff)
		}
	}
}

// A session record keeps the title and update time (version 2), and a
// record of version 1 (an older build's) still decodes, with nothing of
// them known.
func TestSessionRecordVersions(t *testing.T) {
	x, path := openTemp(t)
	s := Session{ID: "s", Header: []byte(`{"id":"s"}`), UID: 7, Events: 9, Size: 300, Inherited: 2,
		Title: "Fix the ünicode bug", UpdatedAt: -5, MetaEvents: 8}
	if err := x.Apply(&Update{Sessions: []Session{s}, Checkpoint: Checkpoint{Segment: 1, Offset: 64}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Session{s}, sessions(t, x)); diff != "" {
		t.Errorf("version 2 record (-want +got):\n%s", diff)
	}
	// Version 1, as an older build wrote it.
	v1 := []byte{sessionRecordV1}
	for _, u := range []uint64{3, 4, 50, 0} {
		v1 = binary.AppendUvarint(v1, u)
	}
	v1 = append(v1, `{"id":"old"}`...)
	err := x.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketSessions).Put([]byte("old"), v1) })
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
	x, err = Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.Verify(); err != nil {
		t.Fatal(err)
	}
	old := Session{ID: "old", Header: []byte(`{"id":"old"}`), UID: 3, Events: 4, Size: 50}
	if diff := cmp.Diff([]Session{old, s}, sessions(t, x)); diff != "" {
		t.Errorf("after a version 1 record (-want +got):\n%s", diff)
	}
	// Version 3 keeps a checked count and its catalog; a record without
	// one is still written as version 2 (an older build reads it).
	if v := encodeSession(s); v[0] != sessionRecordV2 {
		t.Errorf("a record without a checked count is version %d, want 2", v[0])
	}
	c := s
	c.ID, c.Checked, c.Catalog = "t", 9, 0xfeedface00000001
	if v := encodeSession(c); v[0] != sessionRecordV3 {
		t.Errorf("a record with a checked count is version %d, want 3", v[0])
	}
	if err := x.Apply(&Update{Sessions: []Session{c}, Checkpoint: Checkpoint{Segment: 1, Offset: 64}}); err != nil {
		t.Fatal(err)
	}
	if err := x.Verify(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Session{old, s, c}, sessions(t, x)); diff != "" {
		t.Errorf("version 3 record (-want +got):\n%s", diff)
	}
	// Version 4 keeps where the open turn starts (TurnFrom), with or
	// without a checked count; only a record with one is version 4.
	u, w := c, s
	u.ID, u.TurnFrom = "u", 9
	w.ID, w.TurnFrom = "w", 1
	for _, r := range []Session{u, w} {
		if v := encodeSession(r); v[0] != sessionRecordV4 {
			t.Errorf("a record with a TurnFrom is version %d, want 4", v[0])
		}
	}
	if err := x.Apply(&Update{Sessions: []Session{u, w}, Checkpoint: Checkpoint{Segment: 1, Offset: 64}}); err != nil {
		t.Fatal(err)
	}
	if err := x.Verify(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Session{old, s, c, u, w}, sessions(t, x)); diff != "" {
		t.Errorf("version 4 records (-want +got):\n%s", diff)
	}
	// A version 2 record whose title runs past the end, or whose
	// MetaEvents pass its Events, is malformed.
	for _, bad := range [][]byte{
		append(encodeSession(s)[:len(encodeSession(s))-len(s.Header)-len(s.Title)], 'x'),
		encodeSession(Session{UID: 1, Events: 1, MetaEvents: 2}),
		encodeSession(Session{UID: 1, Events: 1, Checked: 2, Catalog: 1}),     // checked past its events
		encodeSession(Session{UID: 1, Events: 1, Checked: 1, Catalog: 1})[:9], // no room for the catalog
		encodeSession(Session{UID: 1, Events: 1, TurnFrom: 2}),                // a turn boundary past its events
		encodeSession(Session{UID: 1, Events: 1, TurnFrom: 1})[:17],           // no room for the boundary
	} {
		if validSession(bad) {
			t.Errorf("record %x decodes", bad)
		}
	}
}

// Open's check hands Options.Sessions every session record, in ID order,
// as Sessions reads them.
func TestOpenPassesSessions(t *testing.T) {
	x, path := openTemp(t)
	u := &Update{Checkpoint: Checkpoint{Segment: 1, Offset: 64}}
	for i := range 3000 { // (several pages)
		id := strings.Repeat("s", i%7+1) + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		u.Sessions = append(u.Sessions, Session{ID: id, Header: []byte(`{"id":"` + id + `"}`), UID: uint64(i + 1), Events: uint64(i), Size: int64(i),
			Title: strings.Repeat("t", i%3), UpdatedAt: int64(i - 1000), MetaEvents: uint64(i / 2)})
	}
	if err := x.Apply(u); err != nil {
		t.Fatal(err)
	}
	x.Close()
	var got []Session
	y, err := Open(path, &Options{Sessions: func(id []byte, s Session, hdr []byte) {
		if s.ID != "" || s.Header != nil {
			t.Errorf("session %q: ID %q, header %q passed decoded", id, s.ID, s.Header)
		}
		s.ID, s.Header = string(id), append([]byte(nil), hdr...)
		got = append(got, s)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if want := sessions(t, y); len(want) != 3000 || !cmp.Equal(got, want) {
		t.Fatalf("Open passed %d sessions, Sessions reads %d: %s", len(got), len(want), cmp.Diff(want, got))
	}
}
