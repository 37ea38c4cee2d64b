package engine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// plantEnv makes TestStoreCheckFailsAnUnreadableSession, run by itself in
// a child process, the planted test: one that leaves a store with a
// damaged frame.
const plantEnv = "SEGLOG_STORECHECK_PLANT"

// TestStoreCheckFailsAnUnreadableSession: a test that leaves a store
// whose session no longer reads (a frame damaged after the close, which
// the test itself never reads) fails at its end, by the store check the
// helper that opened the store registered, naming the store and what
// failed. The planted test runs in a child process (the test binary, run
// with plantEnv), whose failure is this test's success.
func TestStoreCheckFailsAnUnreadableSession(t *testing.T) {
	if os.Getenv(plantEnv) != "" {
		plantUnreadableSession(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreCheckFailsAnUnreadableSession$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), plantEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the planted test passed: the end-of-test check let a damaged store through:\n%s", out)
	}
	for _, want := range []string{"the store the test left in", `session "a": read:`, "frame checksum mismatch", "--- FAIL: TestStoreCheckFailsAnUnreadableSession"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the planted test's output lacks %q:\n%s", want, out)
		}
	}
}

// plantUnreadableSession writes session a in five flushes, closes the
// store and flips a byte in the middle of a's last frame.
func plantUnreadableSession(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{NoPreallocate: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := h.Append(ctx, testgen.Events(uint64(10*i), 10, 200)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, segment.Name(1))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var last segment.FrameInfo
	if _, err := segment.Scan(path, data, segment.ScanOptions{}, func(f *segment.FrameInfo) error {
		if f.Kind == segment.KindEvents {
			last = *f
		}
		return nil
	}); err != nil || last.Size == 0 {
		t.Fatalf("no events frame in %s: %v", path, err)
	}
	data[last.Offset+last.Size/2] ^= 0x40
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
