package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// decodeStrict decodes out into v with exactly v's fields.
func decodeStrict(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// copyOut is copy --json's output, with the documented fields.
type copyOut struct {
	Sessions []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Events uint64 `json:"events"`
		Copied uint64 `json:"copied"`
		Error  string `json:"error"`
	} `json:"sessions"`
	Failed int `json:"failed"`
}

// retainOut is retain --json's output, with the documented fields.
type retainOut struct {
	DryRun     bool     `json:"dryRun"`
	Considered int      `json:"considered"`
	Deleted    []string `json:"deleted"`
	Held       []string `json:"held"`
	Changed    []string `json:"changed"`
	Failed     []struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	} `json:"failed"`
	Tombstones *struct {
		Purged []string `json:"purged"`
		Young  int      `json:"young"`
		Held   []string `json:"held"`
	} `json:"tombstones"`
}

// catAll is cat's output of every session of the store in dir (or at a
// NATS address, copied into a directory first), by ID.
func catAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range []string{"alpha", "beta"} {
		s, code := cli(t, "cat", id, "--dir", dir)
		if code == 0 {
			out[id] = s
		}
	}
	return out
}

// copy moves a store's sessions into a directory, from there into a
// stream, and back into another directory: every event as it was; run
// again it writes nothing; a different session of an id at the
// destination is refused (exit 1) and left as it is.
func TestCopyCommand(t *testing.T) {
	src := copyStore(t, cleanStore)
	want := catAll(t, src)
	dst := filepath.Join(t.TempDir(), "new", "store")
	out, code := cli(t, "copy", "--from", src, "--to", dst)
	if code != 0 || !strings.Contains(out, "alpha: created, 30 events") || !strings.Contains(out, "beta: created, 50 events") {
		t.Fatalf("copy into a new directory: exit %d\n%s", code, out)
	}
	if got := catAll(t, dst); !maps2Equal(got, want) {
		t.Errorf("the copy reads otherwise than the source")
	}
	stdout, stderr, code := cliSplit(t, "copy", "--from", src, "--to", dst, "--json")
	var rep copyOut
	decodeStrict(t, stdout, &rep)
	if code != 0 || rep.Failed != 0 || len(rep.Sessions) != 2 || rep.Sessions[0].Status != "up-to-date" || rep.Sessions[0].Copied != 0 || rep.Sessions[1].Events != 50 {
		t.Errorf("copy again --json: exit %d, %+v\n%s", code, rep, stderr)
	}

	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	stream := srv.ClientURL() + "?stream=CLI&prefix=cli&leases=CLI_LEASES"
	if out, code := cli(t, "copy", "--from", dst, "--to", stream); code != 1 || !strings.Contains(out, "not provisioned") {
		t.Errorf("copy into a stream not provisioned, without --create: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "copy", "--from", dst, "--to", stream, "--create", "beta"); code != 0 || !strings.Contains(out, "beta: created") || strings.Contains(out, "alpha") {
		t.Fatalf("copy of beta into a stream: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "copy", "--from", dst, "--to", stream); code != 0 || !strings.Contains(out, "alpha: created") || !strings.Contains(out, "beta: up to date") {
		t.Fatalf("copy into the stream: exit %d\n%s", code, out)
	}
	back := t.TempDir()
	if out, code := cli(t, "copy", "--from", stream, "--to", back); code != 0 {
		t.Fatalf("copy from the stream: exit %d\n%s", code, out)
	}
	if got := catAll(t, back); !maps2Equal(got, want) {
		t.Errorf("the copy through the stream reads otherwise than the source")
	}

	// Another alpha at a destination: refused, listed, the other copied.
	other := t.TempDir()
	db, err := enginetest.OpenStore(t, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(context.Background(), store.Header{ID: "alpha", CreatedAt: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(context.Background(), testgen.Events(0, 3, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, _, code = cliSplit(t, "copy", "--from", src, "--to", other, "--json")
	decodeStrict(t, stdout, &rep)
	if code != 1 || rep.Failed != 1 || !strings.Contains(rep.Sessions[0].Error, "another session") || rep.Sessions[1].Status != "created" {
		t.Errorf("copy over another alpha: exit %d, %+v", code, rep)
	}
	if s, _ := cli(t, "cat", "alpha", "--dir", other); strings.Count(s, "\n") != 3 {
		t.Errorf("the other alpha changed:\n%s", s)
	}
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// retain deletes by policy in a directory and in a stream (and purges the
// stream's tombstones); --dry-run deletes nothing.
func TestRetainCommand(t *testing.T) {
	dir := copyStore(t, cleanStore) // beta's last event is the newer
	stdout, _, code := cliSplit(t, "retain", "--keep", "1", "--dry-run", "--json", "--dir", dir)
	var rep retainOut
	decodeStrict(t, stdout, &rep)
	if code != 0 || !rep.DryRun || rep.Considered != 2 || !slices.Equal(rep.Deleted, []string{"alpha"}) || rep.Tombstones != nil {
		t.Errorf("retain --dry-run: exit %d, %+v", code, rep)
	}
	if out, _ := cli(t, "ls", "--dir", dir); !strings.Contains(out, "alpha") {
		t.Errorf("a dry run deleted alpha:\n%s", out)
	}
	if out, code := cli(t, "retain", "--keep", "1", "--dir", dir); code != 0 || !strings.Contains(out, "deleted alpha") || !strings.Contains(out, "2 sessions considered, 1 deleted") {
		t.Errorf("retain: exit %d\n%s", code, out)
	}
	if out, _ := cli(t, "ls", "--dir", dir); strings.Contains(out, "alpha") || !strings.Contains(out, "beta") {
		t.Errorf("after retain:\n%s", out)
	}

	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	stream := srv.ClientURL() + "?stream=R&prefix=r&leases=R_LEASES"
	if out, code := cli(t, "copy", "--from", copyStore(t, cleanStore), "--to", stream, "--create"); code != 0 {
		t.Fatalf("copy into a stream: exit %d\n%s", code, out)
	}
	stdout, _, code = cliSplit(t, "retain", "--nats", stream, "--keep", "1", "--tombstones-older-than", "1ns", "--json")
	decodeStrict(t, stdout, &rep)
	if code != 0 || !slices.Equal(rep.Deleted, []string{"alpha"}) || rep.Tombstones == nil || !slices.Equal(rep.Tombstones.Purged, []string{"alpha"}) {
		t.Errorf("retain on a stream: exit %d, %+v (%+v)", code, rep, rep.Tombstones)
	}
	back := t.TempDir()
	if out, code := cli(t, "copy", "--from", stream, "--to", back); code != 0 || strings.Contains(out, "alpha") || !strings.Contains(out, "beta: created") {
		t.Errorf("the stream after retain: exit %d\n%s", code, out)
	}
}
