package search_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

// TestIndexerChild is the indexing process TestSIGKILLOfTheIndexer
// kills: it catches the index of the store in $SEARCH_KILL_DIR up,
// printing its progress.
func TestIndexerChild(t *testing.T) {
	dir := os.Getenv("SEARCH_KILL_DIR")
	if dir == "" {
		return // run only as the child
	}
	search.SetBatchEvents(2048) // commits every 2,048 events: the kills below fall between them
	db, err := enginetest.OpenUnchecked("the parent test checks the store", dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Trigrams: the on-demand trigram table is kept through the kills too.
	ix, err := search.Open(store.Wrap[*engine.Handle](db), filepath.Join(dir, search.DirName), search.Options{Fresh: -1, Trigrams: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	err = ix.CatchUp(context.Background(), func(done, total uint64) { fmt.Printf("progress %d %d\n", done, total) })
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("done")
}

// A SIGKILL of the indexing process at any point of a catch-up loses no
// event and indexes none twice: the next catch-up resumes from the last
// durable cursor.
func TestSIGKILLOfTheIndexer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := store.Wrap[*engine.Handle](db)
	c, err := bench.LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i := range 48 {
		h, err := st.Create(ctx, store.Header{ID: bench.AgentSessionID(i), CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		var seq uint64
		for turn := range 12 {
			evs := bench.AgentTurn(c, i, turn, seq)
			seq += uint64(len(evs))
			for _, e := range evs {
				if _, ok := search.DocOf(e, 0); ok {
					want++
				}
			}
			if err := h.Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	killed := 0
	for round := 1; round <= 6; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestIndexerChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SEARCH_KILL_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		lines, finished := 0, false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "progress") {
				lines++
				if lines == 4+4*round {
					cmd.Process.Signal(syscall.SIGKILL)
					killed++
					break
				}
			}
			if sc.Text() == "done" {
				finished = true
			}
		}
		cmd.Wait()
		if finished {
			break
		}
	}
	if killed < 2 {
		t.Fatalf("the child was killed %d times: the campaign needs more events", killed)
	}
	// The kills left a part indexed.
	if n := countIn(t, dir); n == 0 || n >= want {
		t.Fatalf("after %d kills %d of %d events indexed: no kill fell inside the catch-up", killed, n, want)
	}
	// Recovery: this process catches up.
	ix, err := search.Open(st, filepath.Join(dir, search.DirName), search.Options{Fresh: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if err := ix.CatchUp(ctx, nil); err != nil {
		t.Fatal(err)
	}
	idx, err := sql.Open("sqlite", filepath.Join(dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	var n, distinct int
	if err := idx.QueryRow(`SELECT count(*), count(DISTINCT sid || '/' || seq) FROM docs`).Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if n != want || distinct != want {
		t.Fatalf("after %d kills: %d events indexed (%d distinct), want %d", killed, n, distinct, want)
	}
	// And the full-text tables agree with the rows.
	for _, tbl := range []string{"fts", "tri"} {
		if _, err := idx.Exec(`INSERT INTO ` + tbl + `(` + tbl + `, rank) VALUES ('integrity-check', 1)`); err != nil {
			t.Fatalf("%s integrity after kills: %v", tbl, err)
		}
	}
}

func countIn(t *testing.T, dir string) int {
	t.Helper()
	idx, err := sql.Open("sqlite", filepath.Join(dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer idx.Close()
	var n int
	if err := idx.QueryRow(`SELECT count(*) FROM docs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
