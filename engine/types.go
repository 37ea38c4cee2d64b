package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The store's recorded event types (docs/MULTIPROCESS.md, Files): a host's own
// types, which every process of the store (the CLI included) then knows.
const (
	typesName    = "types.json"
	typesTmpName = "types.json.tmp"
)

// typesFile is the JSON of typesName.
type typesFile struct {
	Types []string `json:"types"`
}

// ErrTypesFile is the kind of the error of a damaged types.json: the
// store opens without the types it records (a warning on Options.Logger),
// and RegisterTypes refuses to overwrite it until it is repaired or
// removed.
var ErrTypesFile = errors.New("engine: damaged " + typesName)

// readTypes returns the types recorded in dir (none if the file is
// missing).
func readTypes(fsys vfs.FS, dir string) ([]string, error) {
	path := filepath.Join(dir, typesName)
	b, err := vfs.ReadFile(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: reading %s: %w", path, err)
	}
	var f typesFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTypesFile, path, err)
	}
	if err := CheckTypes(f.Types...); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrTypesFile, path, err)
	}
	// Sorted and each once, as RegisterTypes writes it, even if the file
	// was edited by hand.
	slices.Sort(f.Types)
	return slices.Compact(f.Types), nil
}

// checkTypeName reports a type a store may not record: empty, longer
// than event.MaxTypeLen, not UTF-8, with a control character or a space,
// or a "*" anywhere but in a final "/*" (a family).
func checkTypeName(t string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: event type %.64q %s", store.ErrInvalidArgument, t, why)
	}
	switch {
	case t == "":
		return bad("is empty")
	case len(t) > event.MaxTypeLen:
		return bad(fmt.Sprintf("is %d bytes, more than %d", len(t), event.MaxTypeLen))
	case !utf8.ValidString(t):
		return bad("is not valid UTF-8")
	case strings.ContainsFunc(t, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		return bad("holds a control character or a space")
	case strings.Contains(strings.TrimSuffix(t, "/*"), "*") || t == "/*":
		return bad(`holds a "*" that is not a final "/*" after a prefix`)
	}
	return nil
}

// CheckTypes reports the first of types that RegisterTypes would refuse
// (ErrInvalidArgument, naming it), so that a caller can check them before
// it opens or creates a store.
func CheckTypes(types ...string) error {
	for _, t := range types {
		if err := checkTypeName(t); err != nil {
			return err
		}
	}
	return nil
}

// RecordedTypes returns the event types recorded in the store in dir
// (RegisterTypes), sorted; none if it records none.
func RecordedTypes(dir string) ([]string, error) { return readTypes(vfs.Default, dir) }

// loadTypes registers the store's recorded types on the DB's catalog, and
// reports whether it learned any it did not know. A damaged file is
// logged and skipped.
func (db *DB) loadTypes() bool {
	types, err := readTypes(db.opts.FS, db.dir)
	if err != nil {
		db.opts.Logger.Warn("engine: the store's recorded event types are not loaded", "error", err)
		return false
	}
	known, learned := db.opts.Catalog.Types(), false
	for _, t := range types {
		if !slices.Contains(known, t) {
			learned = true
		}
	}
	if learned {
		db.opts.Catalog.Register(types...)
	}
	return learned
}

// RegisterTypes records event types in the store, so that every process
// that opens it knows them, the CLI included, and registers them on this
// DB's catalog at once. A type ending in "/*" records a family. Other
// processes learn them when they first meet an event of such a type (a
// read or an append refused by their catalog makes them look again).
// Types that fail CheckTypes are ErrInvalidArgument and record
// nothing. It fails with ErrReadOnlyStore on a read-only DB, and with
// ErrTypesFile while the file is damaged.
func (db *DB) RegisterTypes(ctx context.Context, types ...string) error {
	if db.opts.ReadOnly {
		return store.ErrReadOnlyStore
	}
	if err := CheckTypes(types...); err != nil {
		return err
	}
	if err := db.enter(); err != nil {
		return err
	}
	defer db.leave()
	if err := ctx.Err(); err != nil {
		return err
	}
	sh := db.shared
	if err := sh.Lock(coord.LockTypes, true); err != nil {
		return fmt.Errorf("engine: taking the types lock: %w", err)
	}
	defer sh.Unlock(coord.LockTypes)
	have, err := readTypes(db.opts.FS, db.dir)
	if err != nil {
		return err
	}
	all := slices.Clone(have)
	for _, t := range types {
		if !slices.Contains(all, t) {
			all = append(all, t)
		}
	}
	slices.Sort(all)
	if len(all) > len(have) {
		if err := db.writeTypes(all); err != nil {
			return err
		}
	}
	db.opts.Catalog.Register(all...)
	return nil
}

// writeTypes replaces the types file whole: a temporary, synced, renamed
// over it, the directory synced. Called under coord.LockTypes.
func (db *DB) writeTypes(types []string) error {
	b, err := json.Marshal(typesFile{Types: types})
	if err != nil {
		return err
	}
	tmp, path := filepath.Join(db.dir, typesTmpName), filepath.Join(db.dir, typesName)
	if err := db.opts.FS.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // (a temporary a writer that died left: this process holds the lock now)
	}
	f, err := db.opts.FS.Create(tmp)
	if err != nil {
		return fmt.Errorf("engine: writing %s: %w", tmp, err)
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = db.opts.FS.Rename(tmp, path)
	}
	if err == nil {
		err = db.opts.FS.SyncDir(db.dir)
	}
	if err != nil {
		db.opts.FS.Remove(tmp)
		return fmt.Errorf("engine: writing %s: %w", path, err)
	}
	return nil
}
