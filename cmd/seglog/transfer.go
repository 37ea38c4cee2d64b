package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

func newImportCmd(w, stderr io.Writer, dir *string) *cobra.Command {
	var o importOptions
	cmd := &cobra.Command{
		Use:   "import <root>",
		Short: "import a reference harness root of JSONL logs (v3; v2, v1, v0) into the store, creating it",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			rep, err := runImport(w, newProgress(stderr), *dir, args[0], o)
			if err == nil && len(rep.Refused) > 0 {
				if rep.Sessions == 0 {
					return partialError{fmt.Sprintf("import: all %d session logs refused (listed above)", len(rep.Refused))}
				}
				return partialError{fmt.Sprintf("import: %d of %d session logs refused (listed above); the others were imported",
					len(rep.Refused), rep.Files)}
			}
			return err
		},
	}
	cmd.Flags().StringSliceVar(&o.types, "register", nil, "event types the logs may hold beyond the default catalog (a host's own: acme/deploy, acme/*), comma-separated or repeated; recorded in the store")
	cmd.Flags().BoolVar(&o.strict, "strict", false, "refuse a log the torn-tail rule would cut, instead of importing the rows before the cut")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the outcome as one JSON object (docs: docs/CLI.md, CLI output)")
	return cmd
}

// importOptions are import's flags.
type importOptions struct {
	types  []string // --register
	strict bool     // --strict: a cut log is refused
	asJSON bool     // --json
}

// importReport is what an import did.
type importReport struct {
	Files            int // session logs found, those refused by name included
	Sessions, Events int
	Bytes            int64       // of the log files read
	Cut              []importCut // the sessions imported without the tail the torn-tail rule dropped, in file order
	Refused          []importRefusal
	Elapsed          time.Duration
}

// importCut is a session imported without the rows that jsonl.Parse's
// torn-tail rule dropped from its log.
type importCut struct {
	Path, ID string
	Events   int // imported
	jsonl.Cut
}

// importRefusal is a log import did not take, and why.
type importRefusal struct{ Path, Reason string }

func (r importRefusal) String() string { return r.Path + ": " + r.Reason }

// describeCut says, in a line, what a cut dropped.
func describeCut(c *jsonl.Cut) string {
	why := untag(c.Reason)
	if c.Kind == jsonl.CutBadRow {
		why = "a bad row: " + why
	}
	s := fmt.Sprintf("dropped from line %d on: %s (%s)", c.Line, plural(c.Rows, "row", "rows"), why)
	if c.FrameBytes > 0 && c.Kind != jsonl.CutTornFrame {
		s += fmt.Sprintf(", and the torn last Zstandard frame (%d bytes from byte %d)", c.FrameBytes, c.FrameAt)
	}
	return s
}

// importJSON is import --json's output.
type importJSON struct {
	Files    int                 `json:"files"`
	Sessions int                 `json:"sessions"`
	Events   int                 `json:"events"`
	Cut      []importCutJSON     `json:"cut"`
	Refused  []importRefusedJSON `json:"refused"`
}

type importCutJSON struct {
	Path       string `json:"path"`
	ID         string `json:"id"`
	Events     int    `json:"events"` // imported
	Line       int    `json:"line"`
	Rows       int    `json:"rows"`
	Bytes      int    `json:"bytes"`
	Kind       string `json:"kind"` // incomplete-line, bad-row, torn-frame
	Reason     string `json:"reason"`
	FrameAt    int    `json:"frameAt,omitempty"`
	FrameBytes int    `json:"frameBytes,omitempty"`
}

type importRefusedJSON struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// printImport prints rep on w: a line per cut and per refusal, then
// (with total) the totals; or with asJSON one importJSON object.
func printImport(w io.Writer, rep *importReport, asJSON, total bool) error {
	if asJSON {
		out := importJSON{Files: rep.Files, Sessions: rep.Sessions, Events: rep.Events, Cut: []importCutJSON{}, Refused: []importRefusedJSON{}}
		for _, c := range rep.Cut {
			out.Cut = append(out.Cut, importCutJSON{Path: c.Path, ID: c.ID, Events: c.Events, Line: c.Line, Rows: c.Rows, Bytes: c.Bytes,
				Kind: c.Kind.String(), Reason: untag(c.Reason), FrameAt: c.FrameAt, FrameBytes: c.FrameBytes})
		}
		for _, r := range rep.Refused {
			out.Refused = append(out.Refused, importRefusedJSON{Path: r.Path, Reason: untag(r.Reason)})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, c := range rep.Cut {
		fmt.Fprintf(w, "cut: %s: session %q imported with %s; %s\n", c.Path, c.ID, plural(c.Events, "event", "events"), describeCut(&c.Cut))
	}
	for _, r := range rep.Refused {
		fmt.Fprintln(w, "refused:", untag(r.String()))
	}
	if !total {
		return nil
	}
	_, err := fmt.Fprintf(w, "imported %d sessions, %d events (%d cut, %d refused) in %.2fs%s\n",
		rep.Sessions, rep.Events, len(rep.Cut), len(rep.Refused), rep.Elapsed.Seconds(), importRates(rep))
	return err
}

// minRateRun is the shortest import whose rates printImport prints: over
// a shorter run a per-second figure measures the start-up more than the
// import (and rounds to "0 sessions/s" or divides by zero).
const minRateRun = time.Second

// importRates is the rates part of the import summary (": 12 sessions/s,
// 3.4 MB/s"), or "" when the run was shorter than minRateRun or stored no
// session.
func importRates(rep *importReport) string {
	secs := rep.Elapsed.Seconds()
	if rep.Elapsed < minRateRun || rep.Sessions == 0 {
		return ""
	}
	return fmt.Sprintf(": %s sessions/s, %s MB/s", rateText(float64(rep.Sessions)/secs), rateText(float64(rep.Bytes)/secs/1e6))
}

// rateText spells a positive rate so that it never reads as 0: whole
// numbers from 10 up, two significant digits below (0.5, 0.042).
func rateText(r float64) string {
	if r >= 10 {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'g', 2, 64)
}

// findLogs returns the log of each session directory under root: the
// highest version present (v3 over v2 over v1 over v0's session.jsonl, as
// the reference picks the highest generation), uncompressed first.
// refused lists, with the reason, the files under a session directory
// named like a log that this build does not read (session.v4.jsonl,
// session.v0.jsonl, ...); a directory with a log of a newer version than
// this build reads is refused whole (its older log is not the session's
// newest).
func findLogs(root string) (logs []string, refused []importRefusal, err error) {
	best := map[string]string{} // session dir -> log
	for v := jsonl.OldestVersion; v <= jsonl.Version; v++ {
		for _, compressed := range []bool{true, false} {
			m, err := filepath.Glob(filepath.Join(root, "*", "*", jsonl.FileNameOf(v, compressed)))
			if err != nil {
				return nil, nil, err
			}
			for _, path := range m {
				best[filepath.Dir(path)] = path
			}
		}
	}
	all, err := filepath.Glob(filepath.Join(root, "*", "*", "session*.jsonl*"))
	if err != nil {
		return nil, nil, err
	}
	for _, path := range all {
		v, ok := readableName(filepath.Base(path))
		if ok || !logLikeName(filepath.Base(path)) {
			continue // (a session.v3.jsonl.lock, a .bak: not a log)
		}
		reason := fmt.Sprintf("unsupported log file name (this build reads %s (v0), %s .. %s, or .jsonl.zstd)",
			jsonl.FileNameOf(0, false), jsonl.FileNameOf(1, false), jsonl.FileNameOf(jsonl.Version, false))
		if v > jsonl.Version {
			reason = fmt.Sprintf("log format v%d is newer than this build reads (v%d): upgrade seglog", v, jsonl.Version)
			if old, ok := best[filepath.Dir(path)]; ok {
				refused = append(refused, importRefusal{old, "the session also has a newer log, " + filepath.Base(path) + ", that this build cannot read"})
				delete(best, filepath.Dir(path))
			}
		}
		refused = append(refused, importRefusal{path, reason})
	}
	logs = slices.Sorted(maps.Values(best))
	sort.Slice(refused, func(i, j int) bool { return refused[i].String() < refused[j].String() })
	if len(logs) == 0 && len(refused) == 0 {
		if _, err := os.Stat(root); err != nil {
			return nil, nil, err
		}
	}
	return logs, refused, nil
}

// logLikeName reports whether name is the name of a session log of some
// version: session.jsonl or session.v<N>.jsonl, either maybe with .zstd.
func logLikeName(name string) bool {
	name = strings.TrimSuffix(name, ".zstd")
	rest, ok := strings.CutSuffix(name, ".jsonl")
	if !ok {
		return false
	}
	if rest == "session" {
		return true
	}
	digits, ok := strings.CutPrefix(rest, "session.v")
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// readableName reports whether name is a log file name this build reads,
// and the version it names (0 if none).
func readableName(name string) (int, bool) {
	for v := jsonl.OldestVersion; v <= jsonl.Version; v++ {
		if name == jsonl.FileNameOf(v, false) || name == jsonl.FileNameOf(v, true) {
			return v, true
		}
	}
	var v int
	if n, _ := fmt.Sscanf(name, "session.v%d.", &v); n == 1 {
		return v, false
	}
	return 0, false
}

// runImport imports the session logs under root into the store in dir,
// creating it: import is the one command that does. A log it cannot take
// is refused (rep.Refused) and the others are imported; a root without
// any log is an error, and creates nothing. A log jsonl.Parse cuts (its
// torn-tail rule) is imported without the rows it dropped and listed
// (rep.Cut), or with o.strict refused. It prints rep (printImport). prog
// (may be nil) shows a bar of the logs on a terminal.
func runImport(w io.Writer, prog *progress, dir, root string, o importOptions) (*importReport, error) {
	types := o.types
	files, refusedNames, err := findLogs(root)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		if len(refusedNames) > 0 {
			rep := &importReport{Files: len(refusedNames), Refused: refusedNames}
			if err := printImport(w, rep, o.asJSON, false); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("import: no session log under %s that this build reads (%d refused, listed above)", root, len(refusedNames))
		}
		return nil, fmt.Errorf("import: no session logs under %s (<project>/<encodedId>/session{,.v1,.v2,.v3}.jsonl[.zstd])", root)
	}
	if err := engine.CheckTypes(types...); err != nil { // before the store is created
		return nil, usageError{fmt.Errorf("import --register: %w", err)}
	}
	catalog := event.NewCatalog(types...)
	made, err := noteStoreDir(dir)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	db, err := engine.Open(dir, &engine.Options{Catalog: catalog, Dense: true})
	if err != nil {
		made.undo()
		return nil, err
	}
	// An import that stores nothing (every log refused, or a failure
	// before the first session) leaves no store it created: kept is
	// decided while db is open, the files removed once it is closed.
	kept, decided := false, false
	decide := func() {
		if !decided {
			kept, decided = !storeEmpty(ctx, db), true
		}
	}
	defer func() {
		decide()
		db.Close()
		if !kept {
			made.undo()
		}
	}()
	if len(types) > 0 {
		// Recorded in the store, so that every process reading it knows them.
		if err := db.RegisterTypes(ctx, types...); err != nil {
			return nil, fmt.Errorf("import --register: %w", err) // a damaged types.json, a read-only store
		}
	}
	rep := &importReport{Files: len(files) + len(refusedNames), Refused: refusedNames}
	var open []*engine.Handle
	start := time.Now()
	task := prog.start("import", len(files), "logs", false)
	defer task.end(true)
	refuse := func(path, format string, args ...any) {
		rep.Refused = append(rep.Refused, importRefusal{path, fmt.Sprintf(format, args...)})
	}
	for i, path := range files {
		task.set(i)
		b, err := os.ReadFile(path)
		if err != nil {
			refuse(path, "%v", err)
			continue
		}
		rep.Bytes += int64(len(b))
		log, err := jsonl.Parse(b, strings.HasSuffix(path, ".zstd"))
		if err != nil {
			refuse(path, "%v", err)
			continue
		}
		if enc, err := jsonl.EncodeID(log.Header.ID); err != nil {
			refuse(path, "header id %q: %v", log.Header.ID, err)
			continue
		} else if enc != filepath.Base(filepath.Dir(path)) {
			refuse(path, "header id %q does not match the directory (its directory is named %s: seglog help import)", log.Header.ID, enc)
			continue
		}
		if v := fileVersion(path); v != log.Header.Version {
			refuse(path, "filename identifies v%d, but the header identifies v%d", v, log.Header.Version)
			continue
		}
		if _, err := importCheck(catalog, log); err != nil {
			refuse(path, "%v", err)
			continue
		}
		if log.Cut != nil && o.strict {
			refuse(path, "--strict: the torn-tail rule cuts it: %s", describeCut(log.Cut))
			continue
		}
		h, err := importLog(ctx, db, log)
		if err != nil {
			refuse(path, "%v", err)
			continue
		}
		open = append(open, h)
		if len(open) == importGroup {
			if err := closeGroup(ctx, db, open); err != nil {
				return rep, err
			}
			open = open[:0]
		}
		rep.Sessions++
		rep.Events += len(log.Events)
		if log.Cut != nil {
			rep.Cut = append(rep.Cut, importCut{Path: path, ID: log.Header.ID, Events: len(log.Events), Cut: *log.Cut})
		}
	}
	if err := closeGroup(ctx, db, open); err != nil {
		return rep, err
	}
	task.set(len(files))
	kept, decided = rep.Sessions > 0, rep.Sessions > 0 // none stored: List decides
	decide()
	if err := db.Close(); err != nil {
		return rep, err
	}
	task.end(false)
	rep.Elapsed = time.Since(start)
	return rep, printImport(w, rep, o.asJSON, true)
}

// storeEmpty reports whether db holds no session (false if it cannot
// tell).
func storeEmpty(ctx context.Context, db *engine.DB) bool {
	snaps, err := db.List(ctx)
	return err == nil && len(snaps) == 0
}

// createdStore is what opening a store in a directory would create, to
// undo when an import stores nothing: the topmost directory of dir's
// path that did not exist (dir or an ancestor), or, for a directory that
// existed and held no store, the entries it did not hold. An existing
// store is never touched.
type createdStore struct {
	top    string          // the topmost directory created; "" if dir existed
	dir    string          // dir, if it existed and held no store
	before map[string]bool // dir's entries before the import
}

// noteStoreDir notes what opening a store in dir would create.
func noteStoreDir(dir string) (*createdStore, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		top := filepath.Clean(dir)
		for {
			parent := filepath.Dir(top)
			if parent == top {
				break
			}
			if _, err := os.Stat(parent); !errors.Is(err, fs.ErrNotExist) {
				break
			}
			top = parent
		}
		return &createdStore{top: top}, nil
	}
	if needStore(dir) == nil {
		return &createdStore{}, nil // a store: nothing is undone
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return &createdStore{}, nil // the import's open reports it
	}
	c := &createdStore{dir: dir, before: make(map[string]bool, len(entries))}
	for _, e := range entries {
		c.before[e.Name()] = true
	}
	return c, nil
}

// undo removes what the import created (best effort: what it cannot
// remove stays).
func (c *createdStore) undo() {
	switch {
	case c.top != "":
		os.RemoveAll(c.top)
	case c.dir != "":
		entries, _ := os.ReadDir(c.dir)
		for _, e := range entries {
			if !c.before[e.Name()] {
				os.RemoveAll(filepath.Join(c.dir, e.Name()))
			}
		}
	}
}

// importCheck prepares a parsed log for the store (importImage) and
// refuses what the reference refuses of it: its migration's refusals, a
// type outside catalog in a v3 log, and the v3 surface rules on the log
// as reads will see it. It returns that log (v3).
func importCheck(catalog *event.Catalog, log *jsonl.Log) ([]event.Event, error) {
	v3, err := importImage(log)
	if err != nil {
		return nil, err
	}
	if log.Header.Version == jsonl.Version {
		if err := checkTypes(catalog, log.Events); err != nil {
			return nil, err
		}
	}
	if err := recovery.NewSurfaceChecker(catalog).Check(v3...); err != nil {
		return nil, err
	}
	return v3, nil
}

// importImage prepares a log of an older format for the store and returns
// the log as reads will see it (v3), refusing now what its migration
// would. A v1 or v2 log is stored as it is (the engine reads it migrated,
// and DB.Migrate upgrades it); a v0 log (the older id-addressed API's
// session.jsonl), which no store holds (Create's version 0 means the
// current one), is taken through the reference's v0 → v1 edge, one event
// for one, and stored as v1. log is changed in place for a v0 log.
func importImage(log *jsonl.Log) ([]event.Event, error) {
	h := log.Header
	legacy := recovery.LegacySession{ID: h.ID, CreatedAt: h.CreatedAt, ParentSession: h.ParentSession, IsSeeded: h.IsSeeded, Inherited: log.Inherited}
	switch h.Version {
	case jsonl.Version:
		return log.Events, nil
	case 2:
		return recovery.MigrateV2Session(legacy, log.Events)
	case 0:
		v1, err := recovery.MigrateV0(legacy, log.Events)
		if err != nil {
			return nil, err
		}
		log.Events, log.Header.Version = v1, 1
	}
	v3, _, err := recovery.MigrateV1(legacy, log.Events)
	return v3, err
}

// fileVersion is the format version a log's file name identifies.
func fileVersion(path string) int {
	var v int
	fmt.Sscanf(filepath.Base(path), "session.v%d.", &v)
	return v
}

func checkTypes(c *event.Catalog, evs []event.Event) error {
	for i := range evs {
		if err := c.Check(&evs[i]); err != nil {
			return err
		}
	}
	return nil
}

// importGroup sessions share one flush: an import costs an fdatasync per
// group, not per session.
const importGroup = 64

// closeGroup makes the group's sessions durable with one flush and closes
// their handles (whose own close then finds nothing left to sync).
func closeGroup(ctx context.Context, db *engine.DB, hs []*engine.Handle) error {
	if len(hs) == 0 {
		return nil
	}
	if err := db.Flush(ctx); err != nil {
		return err
	}
	for _, h := range hs {
		if err := h.Close(); err != nil {
			return err
		}
	}
	return nil
}

// importLog creates the session and appends its events; the caller flushes.
func importLog(ctx context.Context, db *engine.DB, log *jsonl.Log) (*engine.Handle, error) {
	var opts []store.CreateOption
	if log.Header.IsSeeded {
		opts = append(opts, store.Inherited(log.Inherited))
	}
	h, err := db.Create(ctx, log.Header, opts...)
	if err != nil {
		return nil, err
	}
	for i := 0; i < len(log.Events); i += 1000 {
		if err := h.Append(ctx, log.Events[i:min(i+1000, len(log.Events))]...); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

func newExportCmd(w io.Writer, dir *string) *cobra.Command {
	var all, compressed bool
	cmd := &cobra.Command{
		Use:   "export (<id> | --all) <root>",
		Short: "write sessions as reference harness logs (session.v3.jsonl) under root",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all != (len(args) == 1) {
				return usageError{errors.New("export takes <id> <root>, or --all <root>")}
			}
			var ids []string
			if !all {
				ids = []string{args[0]}
			}
			return runExport(w, newProgress(cmd.ErrOrStderr()), *dir, args[len(args)-1], ids, compressed)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "export every session")
	cmd.Flags().BoolVar(&compressed, "zstd", false, "write session.v3.jsonl.zstd (a zstd frame per batch)")
	return cmd
}

// runExport writes the sessions ids (nil: all) as reference logs under
// root. A session it cannot export is reported by name on w, with the
// reason, and the others are exported; then it returns a partialError.
// With one session asked for by name, its error is returned as it is.
// prog (may be nil) shows a bar of the sessions on a terminal.
func runExport(w io.Writer, prog *progress, dir, root string, ids []string, compressed bool) error {
	db, err := openRO(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	all := ids == nil
	if all {
		snaps, err := db.List(ctx)
		if err != nil {
			return err
		}
		for _, s := range snaps {
			ids = append(ids, s.Header.ID)
		}
	}
	task := prog.start("export", len(ids), "sessions", false)
	defer task.end(false)
	w = prog.guard(w) // a line per session, on the terminal of the bar too
	failed := 0
	for i, id := range ids {
		task.set(i)
		n, path, err := exportSession(ctx, db, root, id, compressed)
		if err != nil && !all {
			return err
		}
		if errors.Is(err, store.ErrSessionNotFound) {
			// Deleted since the listing (another process writes the
			// store): --all exports the sessions there are.
			fmt.Fprintf(w, "%s: deleted meanwhile, skipped\n", id)
			continue
		}
		if err != nil {
			fmt.Fprintf(w, "not exported: %s\n", untag(err.Error())) // the error names the session
			failed++
			continue
		}
		fmt.Fprintf(w, "%s: %d events -> %s\n", id, n, path)
	}
	task.end(false)
	if failed > 0 {
		return partialError{fmt.Sprintf("export: %d of %d sessions not exported (listed above); the others were exported", failed, len(ids))}
	}
	return nil
}

// maxNameLen is the longest file name (in bytes) the common file systems
// take (NAME_MAX of ext4, XFS, btrfs, tmpfs, APFS).
const maxNameLen = 255

// errNameTooLong: a session whose directory name in the reference layout
// (its encoded id) is longer than file systems allow. The reference has no
// other place for it, so export refuses that session.
var errNameTooLong = errors.New("too long for a file name")

// writeAtomic writes b to path so that path holds either its old content
// or all of b, never a part: a temporary file beside it, synced, renamed
// over it, and the directory synced. A failure removes the temporary.
func writeAtomic(path string, b []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// exportSession writes one session's log under root and returns its event
// count and path. Its errors name the session (the engine's do, its own
// are an *store.SessionError of Op "export").
func exportSession(ctx context.Context, db *engine.DB, root, id string, compressed bool) (int, string, error) {
	fail := func(err error) (int, string, error) {
		if errors.Is(err, syscall.ENAMETOOLONG) {
			err = fmt.Errorf("its log path in the reference layout is %w on this file system: %w", errNameTooLong, err)
		}
		return 0, "", &store.SessionError{ID: id, Op: "export", Err: err}
	}
	h, err := db.Open(ctx, id, store.Read)
	if err != nil {
		return 0, "", err
	}
	defer h.Close()
	hdr := h.Header()
	hdr.Version = jsonl.Version // an older session reads migrated
	enc, err := jsonl.EncodeID(hdr.ID)
	if err != nil {
		return fail(err)
	}
	if len(enc) > maxNameLen {
		// Refused before anything is written: no directory is left behind.
		return fail(fmt.Errorf("its directory name in the reference layout (the encoded id) is %d bytes, %w (at most %d); the layout has no other place for it",
			len(enc), errNameTooLong, maxNameLen))
	}
	path, err := jsonl.LogPath(root, hdr, compressed)
	if err != nil {
		return fail(err)
	}
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return 0, "", err
	}
	var batches []int
	for n := len(evs); n > 0; n -= min(n, 256) {
		batches = append(batches, min(n, 256))
	}
	b, err := jsonl.Encode(hdr, evs, compressed, batches)
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fail(err)
	}
	if err := writeAtomic(path, b); err != nil {
		return fail(err)
	}
	// The other form of the same version, from an earlier export, would be
	// a stale log beside this one (import reads the uncompressed one).
	other, err := jsonl.LogPath(root, hdr, !compressed)
	if err == nil {
		if err := os.Remove(other); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(err)
		}
	}
	return len(evs), path, nil
}

func newDeleteCmd(w io.Writer, dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "delete <id>...",
		Short: "delete sessions (durably; the bytes are reclaimed by compaction)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, ids []string) error {
			db, err := openRW(*dir)
			if err != nil {
				return err
			}
			defer db.Close()
			for _, id := range ids {
				if err := db.Delete(context.Background(), id); err != nil {
					return err
				}
				fmt.Fprintln(w, "deleted", id)
			}
			return db.Close()
		},
	}
}

func newCompactCmd(w io.Writer, dir *string) *cobra.Command {
	var roll bool
	var ratio float64
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "remove segments of deleted data, rewrite mostly dead ones; report the bytes reclaimed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ratio > 1 || math.IsNaN(ratio) {
				return usageError{fmt.Errorf("--live-ratio %v: a fraction of at most 1 (negative: never rewrite)", ratio)}
			}
			db, err := openRW(*dir)
			if err != nil {
				return err
			}
			defer db.Close()
			// The engine reports no steps: a spinner with the time, on a
			// terminal.
			task := newProgress(cmd.ErrOrStderr()).start("compact", 0, "", false)
			rep, err := db.Compact(context.Background(), engine.CompactOptions{Roll: roll, LiveRatio: ratio})
			task.end(err != nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "scanned %d sealed segments, removed %d, rewrote %d, reclaimed %d bytes\n", rep.Scanned, len(rep.Dropped), len(rep.Rewritten), rep.ReclaimedBytes)
			return db.Close()
		},
	}
	cmd.Flags().BoolVar(&roll, "roll", true, "seal the active segment first, so its deleted data can go too")
	cmd.Flags().Float64Var(&ratio, "live-ratio", engine.DefaultLiveRatio, "rewrite a segment whose live bytes are under this fraction of its size (negative: never rewrite)")
	return cmd
}

func newMigrateCmd(w io.Writer, dir *string) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "migrate (<id>... | --all)",
		Short: "upgrade sessions stored in an older format (ls: migration-required) to the current one",
		RunE: func(_ *cobra.Command, ids []string) error {
			if all == (len(ids) > 0) {
				return usageError{errors.New("migrate takes session ids, or --all")}
			}
			return runMigrate(w, *dir, ids)
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "migrate every session that needs it")
	return cmd
}

func runMigrate(w io.Writer, dir string, ids []string) error {
	db, err := openRW(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	if len(ids) == 0 {
		snaps, err := db.List(ctx)
		if err != nil {
			return err
		}
		for _, s := range snaps {
			if s.FormatStatus == store.FormatMigrationRequired {
				ids = append(ids, s.Header.ID)
			}
		}
	}
	migrated := 0
	for _, id := range ids {
		before, err := db.Stat(ctx, id)
		if err != nil {
			return err
		}
		after, err := db.Migrate(ctx, id)
		if err != nil {
			return err
		}
		if before.FormatStatus == store.FormatCurrent {
			fmt.Fprintf(w, "%s: already v%d\n", id, after.Header.Version)
			continue
		}
		fmt.Fprintf(w, "%s: v%d -> v%d, %d -> %d events, revision %s\n", id, before.Header.Version, after.Header.Version, before.EventCount, after.EventCount, after.Revision)
		migrated++
	}
	fmt.Fprintf(w, "migrated %d sessions\n", migrated)
	return db.Close()
}
