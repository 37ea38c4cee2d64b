package search_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/search"
)

// hasTable reports whether f's index has table name (through a second
// connection).
func hasTable(t *testing.T, f *fixture, name string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(f.dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// The trigram table is made by the first substring (or CJK) query, from
// the text already indexed, and kept from then on.
func TestTrigramsOnDemand(t *testing.T) {
	f := newFixture(t)
	f.session("a", "", "the refactoring plan", "nothing")
	if got := ids(f.search(search.Query{Text: "refactoring"})); got != "a:0" {
		t.Fatalf("words: %q", got)
	}
	if hasTable(t, f, "tri") {
		t.Fatal("a trigram table before any substring query")
	}
	r := f.search(search.Query{Text: "factor", Substring: true})
	if got := ids(r); got != "a:0" {
		t.Fatalf("substring over the text indexed before the table: %q", got)
	}
	if s := r.Sessions[0].Hits[0].Snippet; !strings.Contains(s, "«factor»") {
		t.Errorf("substring snippet %q", s)
	}
	if !hasTable(t, f, "tri") {
		t.Fatal("no trigram table after a substring query")
	}
	// Kept by the triggers from then on, in this process and another.
	f.session("b", "", "a factory of words")
	if got := ids(f.search(search.Query{Text: "factor", Substring: true})); got != "a:0 b:0" && got != "b:0 a:0" {
		t.Fatalf("substring after the table: %q", got)
	}
	f.ix.Close()
	f.ix = f.open()
	if got := ids(f.search(search.Query{Text: "actor", Substring: true})); got != "a:0 b:0" && got != "b:0 a:0" {
		t.Fatalf("substring after reopening: %q", got)
	}
	// And a rebuild empties it with the rest.
	if err := f.ix.Rebuild(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := ids(f.search(search.Query{Text: "actor", Substring: true})); got != "a:0 b:0" && got != "b:0 a:0" {
		t.Fatalf("substring after a rebuild: %q", got)
	}
}

// Options.Trigrams makes the table at Open.
func TestTrigramsOption(t *testing.T) {
	f := newFixture(t)
	f.ix.Close()
	ix, err := search.Open(f.st, filepath.Join(f.dir, search.DirName), search.Options{Fresh: -1, Trigrams: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	if !hasTable(t, f, "tri") {
		t.Fatal("Options.Trigrams: no trigram table after Open")
	}
}

// The hits are ranked and cut inside FTS5 a chunk at a time: filters
// that reject the best-ranked hits, and pages past the first chunk,
// still find every hit once.
func TestRankedChunksAndFilters(t *testing.T) {
	f := newFixture(t)
	// 300 strong hits in one directory (the word three times), then the
	// weak ones (once, in a longer text) in another.
	for i := range 300 {
		f.session(fmt.Sprintf("x%03d", i), "/strong", "omega omega omega")
	}
	for i := range 30 {
		f.session(fmt.Sprintf("y%02d", i), "/weak", "omega and many other words that make it rank below the others")
	}
	r := f.search(search.Query{Text: "omega", Cwd: "/weak", Limit: 50})
	if len(r.Sessions) != 30 || r.Next != "" {
		t.Fatalf("filtered: %d sessions, next %q, want 30 and the last page", len(r.Sessions), r.Next)
	}
	for _, s := range r.Sessions {
		if !strings.HasPrefix(s.ID, "y") || len(s.Hits) != 1 || s.Hits[0].Snippet != "«omega» and many other words that make it rank below the others" {
			t.Fatalf("filtered hit %+v", s)
		}
	}
	// Ranked: the strong ones first; pages of 40 sessions cover all 330
	// once, the weak last.
	seen := map[string]bool{}
	var order []string
	q := search.Query{Text: "omega", Limit: 40}
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("pages do not end")
		}
		r := f.search(q)
		for _, s := range r.Sessions {
			if seen[s.ID] {
				t.Fatalf("session %s on two pages", s.ID)
			}
			seen[s.ID] = true
			order = append(order, s.ID)
		}
		if r.Next == "" {
			break
		}
		q.After = r.Next
	}
	if len(order) != 330 {
		t.Fatalf("pages: %d sessions, want 330", len(order))
	}
	for i, id := range order {
		if strings.HasPrefix(id, "y") != (i >= 300) {
			t.Fatalf("rank: %s at %d", id, i)
		}
	}
}

// An index of schema 3 (rows indexed by AFTER INSERT triggers) opens as
// schema 4 (rows indexed by txn.event, the triggers dropped), keeps what
// it holds, and indexes each new row once, in both tables.
func TestSchema3Migrates(t *testing.T) {
	f := newFixture(t)
	f.session("a", "", "an old walrus", "nothing")
	// (A substring query makes the trigram table.)
	if got := ids(f.search(search.Query{Text: "factor walrus", Substring: true})); got != "" {
		t.Fatalf("before: %q", got)
	}
	if got := ids(f.search(search.Query{Text: "walrus"})); got != "a:0" {
		t.Fatalf("before: %q", got)
	}
	f.ix.Close()
	// What schema 3 was: the same tables, with the insert triggers.
	db, err := sql.Open("sqlite", filepath.Join(f.dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN
	INSERT INTO fts(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER tri_ai AFTER INSERT ON docs BEGIN
	INSERT INTO tri(rowid, text) VALUES (new.rowid, new.text);
END;
UPDATE meta SET v = '3' WHERE k = 'schema'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f.ix = f.open()
	f.session("b", "", "a young walrus", "refactoring walruses")
	if got := ids(f.search(search.Query{Text: "walrus"})); got != "a:0 b:0" && got != "b:0 a:0" {
		t.Fatalf("words after the migration: %q", got)
	}
	if got := ids(f.search(search.Query{Text: "alrus", Substring: true})); got != "b:1,0 a:0" && got != "b:0,1 a:0" && got != "a:0 b:1,0" && got != "a:0 b:0,1" {
		t.Fatalf("substring after the migration: %q", got)
	}
	// Each row once in each table (a trigger left behind would add it
	// twice: FTS5 takes a rowid again without complaint).
	db, err = sql.Open("sqlite", filepath.Join(f.dir, search.DirName, search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		`SELECT v FROM meta WHERE k = 'schema'`,
		`SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%_ai'`,
		`SELECT count(*) FROM docs`,
		`SELECT count(*) FROM fts('walrus OR walruses OR nothing')`,
		`SELECT count(*) FROM tri('alrus')`,
	} {
		var v string
		if err := db.QueryRow(q).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		want := map[string]string{"SELECT v FROM meta WHERE k = 'schema'": "4", "SELECT count(*) FROM docs": "4", `SELECT count(*) FROM fts('walrus OR walruses OR nothing')`: "4", `SELECT count(*) FROM tri('alrus')`: "3"}[q]
		if want == "" {
			want = "0"
		}
		if v != want {
			t.Errorf("%s: %s, want %s", q, v, want)
		}
	}
	for _, table := range []string{"fts", "tri"} {
		if _, err := db.Exec(`INSERT INTO ` + table + `(` + table + `, rank) VALUES ('integrity-check', 1)`); err != nil {
			t.Errorf("%s integrity-check (against docs): %v", table, err)
		}
	}
}
