package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/backend/jetstream/embedded"
)

func TestSearchCommand(t *testing.T) {
	dir := copyStore(t, cleanStore)
	out, code := cli(t, "--dir", dir, "stats", "--json")
	var before statsJSON
	if code != 0 || json.Unmarshal([]byte(out), &before) != nil || before.Disk.Search != 0 {
		t.Fatalf("stats of a store never searched: %d %s", code, out)
	}
	out, code = cli(t, "--dir", dir, "search", "offset", "--roles", "*", "--json", "--context", "1", "--order", "oldest")
	var res searchJSON
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
		t.Fatalf("search: %d %s", code, out)
	}
	if len(res.Sessions) != 2 || len(res.Sessions[0].Hits) == 0 {
		t.Fatalf("search: %s", out)
	}
	h := res.Sessions[0].Hits[0]
	if !strings.Contains(h.Snippet, "«offset»") || (h.Seq > 0 && len(h.Before) != 1) || len(h.After) != 1 {
		t.Errorf("hit %+v", h)
	}
	out, code = cli(t, "--dir", dir, "stats", "--json")
	var after statsJSON
	if code != 0 || json.Unmarshal([]byte(out), &after) != nil || after.Disk.Search <= 0 {
		t.Fatalf("stats after a search: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "search", "index.sqlite")); err != nil {
		t.Fatal(err)
	}
	// The engine's check leaves the index alone.
	if out, code := cli(t, "--dir", dir, "check"); code != 0 {
		t.Errorf("check of a searched store: %d %s", code, out)
	}
	out, code = cli(t, "--dir", dir, "search", "--rebuild")
	if code != 0 || !strings.Contains(out, "index: done in") {
		t.Errorf("rebuild: %d %q", code, out)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"search", `"unclosed`}},
		{[]string{"search", "NOT"}},
		{[]string{"search", "a\x00b"}},
		{[]string{"search", strings.Repeat("x", 100<<10)}},
		{[]string{"search", "x", "--since", "yesterday"}},
		{[]string{"search", "x", "--order", "best"}},
		{[]string{"search"}},
		{[]string{"search", "x", "--rebuild"}},
	} {
		out, code := cli(t, append([]string{"--dir", dir}, c.args...)...)
		if code != exitUsage || !strings.Contains(out, "seglog: ") {
			t.Errorf("%.40q: exit %d, %q", c.args, code, out)
		}
	}
}

func TestSearchDamagedSession(t *testing.T) {
	dir := copyStore(t, damagedStore)
	out, code := cli(t, "--dir", dir, "search", "the", "--roles", "*")
	if code != exitFailed || !strings.Contains(out, `session "alpha"`) || !strings.Contains(out, "beta  (") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

// The same search over a JetStream store, its index local.
func TestSearchJetStream(t *testing.T) {
	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	stream := srv.ClientURL() + "?stream=S&prefix=s&leases=S_LEASES"
	if out, code := cli(t, "copy", "--from", copyStore(t, cleanStore), "--to", stream, "--create"); code != 0 {
		t.Fatalf("copy: %d %s", code, out)
	}
	idx := t.TempDir()
	if out, code := cli(t, "search", "offset", "--nats", stream); code != exitUsage || !strings.Contains(out, "--index") {
		t.Errorf("--nats without --index: %d %s", code, out)
	}
	local := copyStore(t, cleanStore)
	want, code := cli(t, "--dir", local, "search", "offset", "--roles", "*", "--order", "oldest", "--json")
	if code != 0 {
		t.Fatal(want)
	}
	got, code := cli(t, "search", "offset", "--roles", "*", "--order", "oldest", "--json", "--nats", stream, "--index", idx)
	if code != 0 || got != want {
		t.Errorf("over the stream: %d\n%s\nover the directory:\n%s", code, got, want)
	}
}
