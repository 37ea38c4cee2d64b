package search_test

import (
	"database/sql"
	"os"
	"path/filepath"

	"github.com/seglog/seglog/search"
)

func writeFile(p string, b []byte) error { return os.WriteFile(p, b, 0o644) }
func removeFile(p string)                { os.Remove(p) }

// countDocs counts the indexed events of f's index (through a second
// connection: the index is SQLite).
func countDocs(f *fixture, n *int) error {
	db, err := sql.Open("sqlite", filepath.Join(f.dir, search.DirName, search.FileName))
	if err != nil {
		return err
	}
	defer db.Close()
	return db.QueryRow(`SELECT count(*) FROM docs`).Scan(n)
}
