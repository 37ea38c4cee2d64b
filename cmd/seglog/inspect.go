package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// errNoStore is the kind of a *noStoreError.
var errNoStore = errors.New("no store")

// noStoreError: a command other than import was given a directory that
// holds no store. It names the directory and what was missing.
type noStoreError struct {
	Dir    string
	Reason string // "the directory does not exist", ...
}

func (e *noStoreError) Error() string {
	return fmt.Sprintf("no store in %s: %s (--dir or $SEGLOG_DIR names the store; seglog import creates one)", e.Dir, e.Reason)
}

func (e *noStoreError) Is(target error) bool { return target == errNoStore }

// needStore checks that dir holds a store (a segment file or index.db)
// before a command opens it: engine.Open would create an empty store, and
// only import may create one. The engine still verifies what it opens.
func needStore(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &noStoreError{dir, "the directory does not exist"}
	case err != nil:
		return err
	case !fi.IsDir():
		return &noStoreError{dir, "not a directory"}
	}
	ids, err := segment.List(nil, dir)
	if err != nil {
		return err
	}
	if len(ids) > 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, indexFile)); err == nil {
		return nil
	}
	return &noStoreError{dir, "no segment files (*.seg) and no " + indexFile}
}

// indexFile is the engine's default index file in a store directory.
const indexFile = "index.db"

// openRO opens an existing store read-only.
func openRO(dir string) (*engine.DB, error) {
	if err := needStore(dir); err != nil {
		return nil, err
	}
	// An inspector reads every store: events of types this build does not
	// know are shown (and exported) as stored, and flagged, never refused.
	return engine.Open(dir, &engine.Options{ReadOnly: true, Catalog: event.AnyCatalog()})
}

// openRW opens an existing store for writing (never creating one).
func openRW(dir string) (*engine.DB, error) {
	if err := needStore(dir); err != nil {
		return nil, err
	}
	return engine.Open(dir, nil)
}

func newCheckCmd(w io.Writer, dir *string) *cobra.Command {
	var repair, asJSON, strict bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "verify every frame, the sessions' seqs and the index (--strict: the v3 surface rules); --repair rebuilds the index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheck(w, newProgress(cmd.ErrOrStderr()), *dir, repair, asJSON, strict)
		},
	}
	cmd.Flags().BoolVar(&repair, "repair", false, "rebuild the index from the segments (after reporting)")
	cmd.Flags().BoolVar(&strict, "strict", false, "also read every session and report each event that breaks the v3 surface rules (docs/EVENTS.md)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object (docs: docs/CLI.md, CLI output)")
	return cmd
}

// checkJSON is check --json's output.
type checkJSON struct {
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
	Notes    []string `json:"notes"`
	Segments int      `json:"segments"`
	Frames   int      `json:"frames"`
	Sessions int      `json:"sessions"`
	Events   uint64   `json:"events"`
	Repaired bool     `json:"repaired"`
}

// runCheck checks the store in dir and reports on w; prog (may be nil)
// shows, on a terminal, a spinner while the engine checks (it reports no
// steps) and a bar of the sessions --strict reads.
func runCheck(w io.Writer, prog *progress, dir string, repair, asJSON, strict bool) error {
	if err := needStore(dir); err != nil {
		return err
	}
	task := prog.start("check", 0, "", false)
	rep, err := engine.Check(dir, nil)
	task.end(err != nil)
	if err != nil {
		return err
	}
	if strict {
		rep.Problems = append(rep.Problems, surfaceProblems(dir, prog)...)
	}
	if asJSON {
		out := checkJSON{OK: len(rep.Problems) == 0, Problems: []string{}, Notes: append([]string{}, rep.Notes...),
			Segments: rep.Segments, Frames: rep.Frames, Sessions: rep.Sessions, Events: uint64(rep.Events)}
		for _, p := range rep.Problems {
			out.Problems = append(out.Problems, fmt.Sprint(p))
		}
		if repair {
			if err := engine.RebuildIndex(dir, nil); err != nil {
				return fmt.Errorf("repair: %w", err)
			}
			out.Repaired = true
		}
		if err := writeJSON(w, out); err != nil {
			return err
		}
		if !out.OK {
			return errProblems
		}
		return nil
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(w, p)
	}
	fmt.Fprintf(w, "%d segments, %d frames, %d sessions, %d events\n", rep.Segments, rep.Frames, rep.Sessions, rep.Events)
	if repair {
		if err := engine.RebuildIndex(dir, nil); err != nil {
			return fmt.Errorf("repair: %w", err)
		}
		fmt.Fprintln(w, "index rebuilt from the segments")
	}
	if len(rep.Problems) > 0 {
		fmt.Fprintf(w, "%d problems\n", len(rep.Problems))
		return errProblems
	}
	fmt.Fprintln(w, "OK")
	return nil
}

// surfaceProblems is check --strict's part: every session of the store in
// dir read (v2 ones migrated, as reads see them) and checked against the
// v3 surface rules (recovery.SurfaceChecker, knowing the built-in and the
// recorded types); one problem per session that breaks them, naming the
// event, or that could not be read.
func surfaceProblems(dir string, prog *progress) []engine.Problem {
	var ps []engine.Problem
	problem := func(id string, err error) {
		ps = append(ps, engine.Problem{Path: dir, Offset: -1, Session: id, What: "strict: " + untag(err.Error())})
	}
	types, err := engine.RecordedTypes(dir)
	if err != nil {
		problem("", err)
		return ps
	}
	known := event.NewCatalog(types...)
	db, err := openRO(dir)
	if err != nil {
		problem("", err)
		return ps
	}
	defer db.Close()
	ctx := context.Background()
	snaps, err := db.List(ctx)
	if err != nil {
		problem("", err)
		return ps
	}
	task := prog.start("check --strict", len(snaps), "sessions", false)
	defer task.end(false)
	for i, s := range snaps {
		task.set(i)
		id := s.Header.ID
		if err := checkSessionSurface(ctx, db, id, known); err != nil {
			problem(id, err)
		}
	}
	return ps
}

// checkSessionSurface reads session id and applies the v3 surface rules.
func checkSessionSurface(ctx context.Context, db *engine.DB, id string, known *event.Catalog) error {
	h, err := db.Open(ctx, id, store.Read)
	if err != nil {
		return err
	}
	defer h.Close()
	c := recovery.NewSurfaceChecker(known)
	for ev, err := range h.Events(ctx, 0) {
		if err != nil {
			return err
		}
		if err := c.Check(ev); err != nil {
			return err
		}
	}
	return nil
}

func newLsCmd(w io.Writer, dir *string) *cobra.Command {
	var asJSON bool
	var opts store.ListOptions
	var sortBy string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "list sessions: id, events, bytes, updated time, revision, format status, title",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.OrderBy, err = store.ParseListOrder(sortBy); err != nil {
				return usageError{err}
			}
			if err := opts.Check(); err != nil {
				return usageError{err}
			}
			return runLs(w, cmd.ErrOrStderr(), *dir, opts, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {sessions: [...], next: cursor} (docs: docs/CLI.md, CLI output)")
	cmd.Flags().StringVar(&opts.Prefix, "prefix", "", "only sessions whose ID starts with this")
	cmd.Flags().StringVar(&opts.Cwd, "cwd", "", "only sessions whose header's cwd is this")
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "at most this many sessions (0: all); when more follow, stderr says the --after to pass for the next page")
	cmd.Flags().StringVar(&opts.After, "after", "", "only sessions that sort after this (the cursor of the previous page)")
	cmd.Flags().StringVar(&sortBy, "sort", "id", "order: id, or updated (most recently updated first)")
	return cmd
}

// sessionJSON is an element of ls --json.
type sessionJSON struct {
	ID              string `json:"id"`
	Events          uint64 `json:"events"`
	Bytes           int64  `json:"bytes"`
	Revision        string `json:"revision"`
	Format          string `json:"format"`
	CreatedAt       int64  `json:"createdAt"`
	UpdatedAt       int64  `json:"updatedAt"`
	Title           string `json:"title,omitempty"`
	Cwd             string `json:"cwd,omitempty"`
	ParentSession   string `json:"parentSession,omitempty"`
	IsSeeded        bool   `json:"isSeeded,omitempty"`
	InheritedEvents uint64 `json:"inheritedEvents,omitempty"`
}

// lsJSON is ls --json's output: the page, and the --after of the next
// one ("" after the last).
type lsJSON struct {
	Sessions []sessionJSON `json:"sessions"`
	Next     string        `json:"next"`
}

// shellQuote quotes s for a POSIX shell: in single quotes, each single
// quote inside closed, escaped with a backslash and reopened.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// listSessions opens the store read-only and lists its sessions.
func listSessions(dir string) ([]store.Snapshot, error) {
	snaps, _, err := listPage(dir, store.ListOptions{})
	return snaps, err
}

// listPage opens the store read-only and lists a page of its sessions.
func listPage(dir string, opts store.ListOptions) ([]store.Snapshot, string, error) {
	db, err := openRO(dir)
	if err != nil {
		return nil, "", err
	}
	defer db.Close()
	return db.ListPage(context.Background(), opts)
}

func runLs(w, errw io.Writer, dir string, opts store.ListOptions, asJSON bool) error {
	snaps, next, err := listPage(dir, opts)
	if err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(errw, "seglog: more sessions follow: --after %s\n", shellQuote(next))
	}
	if asJSON {
		out := lsJSON{Sessions: make([]sessionJSON, 0, len(snaps)), Next: next}
		for _, s := range snaps {
			out.Sessions = append(out.Sessions, sessionJSON{ID: s.Header.ID, Events: s.EventCount, Bytes: s.SizeBytes, Revision: s.Revision,
				Format: s.FormatStatus.String(), CreatedAt: s.Header.CreatedAt, UpdatedAt: s.UpdatedAt, Title: s.Title, Cwd: s.Header.Cwd,
				ParentSession: s.Header.ParentSession, IsSeeded: s.Header.IsSeeded, InheritedEvents: s.InheritedEventCount})
		}
		return writeJSON(w, out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tEVENTS\tBYTES\tUPDATED\tREVISION\tFORMAT\tTITLE")
	for _, s := range snaps {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Header.ID, s.EventCount, s.SizeBytes, lsTime(s.UpdatedAt), s.Revision, s.FormatStatus, oneLine(s.Title))
	}
	return tw.Flush()
}

// lsTime shows a time in milliseconds since the epoch, in UTC to the
// second.
func lsTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05Z") }

// oneLine is s with each control character (a tab or newline would break
// the table) shown as a space.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

func newStatsCmd(w io.Writer, dir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "store totals: sessions, events, the sessions' bytes, segments, and the disk every file of the store takes, by kind",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runStats(w, *dir, asJSON) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object (docs: docs/CLI.md, CLI output)")
	return cmd
}

// statsJSON is stats --json's output.
type statsJSON struct {
	Sessions int    `json:"sessions"`
	Events   uint64 `json:"events"`
	Bytes    int64  `json:"bytes"` // the sessions' frames
	Segments int    `json:"segments"`
	// Disk: every file of the store, by kind (diskUsage)
	Disk diskJSON `json:"disk"`
}

func runStats(w io.Writer, dir string, asJSON bool) error {
	snaps, err := listSessions(dir)
	if err != nil {
		return err
	}
	var events uint64
	var bytes int64
	for _, s := range snaps {
		events += s.EventCount
		bytes += s.SizeBytes
	}
	ids, err := segment.List(nil, dir)
	if err != nil {
		return err
	}
	disk, err := diskUsage(dir)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, statsJSON{Sessions: len(snaps), Events: events, Bytes: bytes, Segments: len(ids), Disk: disk})
	}
	fmt.Fprintf(w, "sessions  %d\nevents    %d\nbytes     %d (frames of the sessions)\nsegments  %d\n", len(snaps), events, bytes, len(ids))
	if events > 0 {
		fmt.Fprintf(w, "bytes/event %.1f\n", float64(bytes)/float64(events))
	}
	fmt.Fprintf(w, "disk      %d (every file of the store)\n", disk.Total)
	for _, r := range []struct {
		name string
		n    int64
		note string
	}{
		{"segments", disk.Segments, "up to their last frame"},
		{"room", disk.SegmentRoom, "preallocated ahead of the tail"},
		{"index", disk.Index, "index.db"},
		{"search", disk.Search, "search/: the full-text index, once searched"},
		{"dictionaries", disk.Dictionaries, fmt.Sprintf("%d files", disk.DictionaryFiles)},
		{"coordination", disk.Coordination, "LOCK, locks, shm, lease-*"},
		{"other", disk.Other, "types.json, temporaries, quarantine/"},
	} {
		fmt.Fprintf(w, "  %-13s %d (%s)\n", r.name, r.n, r.note)
	}
	return nil
}

func newCatCmd(w io.Writer, dir *string) *cobra.Command {
	var from, n int
	var balanced bool
	cmd := &cobra.Command{
		Use:   "cat <id>",
		Short: "print a session's events as JSON lines (--balanced: with the closers of an open turn)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from < 0 {
				return usageError{fmt.Errorf("--from %d: a seq is not negative", from)}
			}
			return runCat(w, cmd.ErrOrStderr(), *dir, args[0], from, n, balanced)
		},
	}
	cmd.Flags().BoolVar(&balanced, "balanced", false, "end an open turn with the closers a resume would append (shown, not stored; flagged on stderr)")
	cmd.Flags().IntVar(&from, "from", 0, "first seq")
	cmd.Flags().IntVarP(&n, "n", "n", -1, "at most this many events (negative: all)")
	return cmd
}

// newInspectCmd is the seed's name for the balanced view: cat --balanced,
// with the same --from and --n.
func newInspectCmd(w io.Writer, dir *string) *cobra.Command {
	var from, n int
	cmd := &cobra.Command{
		Use:   "inspect <id>",
		Short: "print a session's events with the closers a resume would append to an open turn (shown, not stored; cat --balanced)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from < 0 {
				return usageError{fmt.Errorf("--from %d: a seq is not negative", from)}
			}
			return runCat(w, cmd.ErrOrStderr(), *dir, args[0], from, n, true)
		},
	}
	cmd.Flags().IntVar(&from, "from", 0, "first seq")
	cmd.Flags().IntVarP(&n, "n", "n", -1, "at most this many events (negative: all)")
	return cmd
}

// runCat prints the events as JSON lines on w, exactly as stored; an
// event the default catalog would refuse (a host's own type, or a retired
// shape) is flagged on errw, by seq, and printed all the same.
func runCat(w, errw io.Writer, dir, id string, from, n int, balanced bool) error {
	db, err := openRO(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx := context.Background()
	var evs []event.Event
	if balanced {
		in, err := db.Inspect(ctx, id)
		if err != nil {
			return err
		}
		all := append(in.Events, in.Closers...)
		lo, hi := store.ReadRange(uint64(len(all)), from, n)
		if lo < hi {
			evs = all[lo:hi]
		}
		// Say who holds the session, then flag the closers among what
		// is printed: of a session a live writer holds, the turn is in
		// progress, and they are what a resume would append if it died.
		if in.Holder != nil {
			state := "its last turn is closed"
			if in.Closers != nil {
				state = "its turn is in progress, not interrupted"
			}
			fmt.Fprintf(errw, "seglog: session %q is held by a live writer (%s): %s\n", id, holderText(in.Holder), state)
		}
		if ts := in.Turn; ts.Open {
			fmt.Fprintf(errw, "seglog: %s\n", turnText(ts))
		}
		if first := max(lo, uint64(len(in.Events))); first < hi {
			if in.Holder != nil {
				fmt.Fprintf(errw, "seglog: seq %d..%d: closers a resume would append if that writer died (not stored)\n", all[first].Seq, all[hi-1].Seq)
			} else {
				fmt.Fprintf(errw, "seglog: seq %d..%d: closers a resume would append to the open turn (not stored)\n", all[first].Seq, all[hi-1].Seq)
			}
		}
	} else {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			return err
		}
		if evs, err = h.Read(ctx, from, n); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(w)
	known := event.NewCatalog()
	if recorded, err := engine.RecordedTypes(dir); err == nil {
		known.Register(recorded...) // the host types the store records are no surprise
	}
	for i := range evs {
		if err := enc.Encode(&evs[i]); err != nil {
			return err
		}
		if err := known.Check(&evs[i]); err != nil {
			var ue *event.UnsupportedError
			if errors.As(err, &ue) {
				fmt.Fprintf(errw, "seglog: seq %d: %q is not in this build's catalog (%s): shown as stored, not interpreted\n", ue.Seq, ue.Type, ue.Reason)
			}
		}
	}
	return nil
}

func newSegmentsCmd(w io.Writer, dir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "segments",
		Short: "list segment files: id, generation, bytes, used, sealed, frames, events, live share, compression",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return runSegments(w, *dir, asJSON) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array, an object per segment (docs: docs/CLI.md, CLI output)")
	return cmd
}

// segmentJSON is an element of segments --json. LiveBytes is -1 when the
// store did not open (a damaged one is still listed); Error is set when
// the file did not open or scan.
type segmentJSON struct {
	ID          uint64  `json:"id"`
	Generation  uint64  `json:"generation"`
	FileBytes   int64   `json:"fileBytes"`
	UsedBytes   int64   `json:"usedBytes"`
	Sealed      bool    `json:"sealed"`
	Frames      int     `json:"frames"`
	Events      int     `json:"events"`
	LiveBytes   int64   `json:"liveBytes"`
	RawBytes    int64   `json:"rawBytes"`
	StoredBytes int64   `json:"storedBytes"`
	Compression float64 `json:"compression,omitempty"`
	Error       string  `json:"error,omitempty"`
}

func runSegments(w io.Writer, dir string, asJSON bool) error {
	if err := needStore(dir); err != nil {
		return err
	}
	ids, err := segment.List(nil, dir)
	if err != nil {
		return err
	}
	// The live share needs the sessions: from the engine, if the store
	// opens (a damaged one is still listed, without it).
	live := map[uint64]int64{}
	if db, err := openRO(dir); err == nil {
		usage, err := db.Usage(context.Background())
		db.Close()
		if err == nil {
			for _, u := range usage {
				live[u.ID] = u.LiveBytes
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tGEN\tFILE BYTES\tUSED\tSEALED\tFRAMES\tEVENTS\tLIVE\tCOMPRESSION")
	rows := []segmentJSON{}
	failed := 0 // segments that did not open or scan: a damaged store exits 1
	for _, id := range ids {
		var frames, events int
		var raw, stored int64
		res, size, gen, openErr, err := scanSegment(filepath.Join(dir, segment.Name(id)), func() {
			frames, events, raw, stored = 0, 0, 0, 0
		}, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindEvents {
				frames++
				events += int(fi.Count)
				raw += int64(fi.RawLen)
				stored += int64(fi.StoredLen)
			}
			return nil
		})
		if errors.Is(openErr, fs.ErrNotExist) {
			continue // removed since listed: a compaction beside us
		}
		if openErr != nil {
			fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t-\t-\t-\t%v\n", id, openErr)
			rows = append(rows, segmentJSON{ID: id, LiveBytes: -1, Error: openErr.Error()})
			failed++
			continue
		}
		ratio := "-"
		if stored > 0 {
			ratio = fmt.Sprintf("%.2fx", float64(raw)/float64(stored))
		}
		if err != nil {
			ratio = err.Error()
		}
		// The live share is of the bytes used: an active segment's
		// preallocated tail holds nothing.
		liveShare, liveBytes := "-", int64(-1)
		if n, ok := live[id]; ok && res.End > 0 {
			liveShare, liveBytes = fmt.Sprintf("%.0f%%", 100*float64(n)/float64(res.End)), n
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%v\t%d\t%d\t%s\t%s\n", id, gen, size, res.End, res.Sealed, frames, events, liveShare, ratio)
		row := segmentJSON{ID: id, Generation: gen, FileBytes: size, UsedBytes: res.End, Sealed: res.Sealed, Frames: frames,
			Events: events, LiveBytes: liveBytes, RawBytes: raw, StoredBytes: stored}
		if stored > 0 {
			row.Compression = float64(raw) / float64(stored)
		}
		if err != nil {
			row.Error = err.Error()
			failed++
		}
		rows = append(rows, row)
	}
	if asJSON {
		err = writeJSON(w, rows)
	} else {
		err = tw.Flush()
	}
	if err == nil && failed > 0 {
		err = partialError{fmt.Sprintf("segments: %d of %d segment files did not open or scan (listed above)", failed, len(ids))}
	}
	return err
}

// beforeScan, if set (by tests), runs before scanSegment opens a file
// (opened false) and again before it scans it (opened true).
var beforeScan func(path string, opened bool)

// scanSegment opens the segment file at path and scans it (reset, then fn
// for every frame). A host may seal the segment meanwhile, trimming its
// preallocated tail under this mapping, and touching the mapping past the
// file's new end faults (SIGBUS): the fault is caught and the file opened
// and scanned again, at its new size. openErr is the file's failure to
// open, err the scan's.
func scanSegment(path string, reset func(), fn func(*segment.FrameInfo) error) (res segment.ScanResult, size int64, gen uint64, openErr, err error) {
	for attempt := 1; ; attempt++ {
		reset()
		var faulted bool
		res, size, gen, faulted, openErr, err = scanSegmentOnce(path, fn)
		if !faulted {
			return res, size, gen, openErr, err
		}
		if attempt == 3 {
			return res, size, gen, nil, fmt.Errorf("segment %s: shrunk under the scan %d times (a host sealing it?)", path, attempt)
		}
	}
}

func scanSegmentOnce(path string, fn func(*segment.FrameInfo) error) (res segment.ScanResult, size int64, gen uint64, faulted bool, openErr, err error) {
	if beforeScan != nil {
		beforeScan(path, false)
	}
	r, openErr := segment.OpenReader(nil, path)
	if openErr != nil {
		return res, 0, 0, false, openErr, nil
	}
	defer r.Close()
	size, gen = r.Size(), r.Header().Generation
	if beforeScan != nil {
		beforeScan(path, true)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(interface{ Addr() uintptr }); !ok {
				panic(p)
			}
			faulted = true
		}
	}()
	res, err = r.Scan(segment.ScanOptions{}, fn)
	return res, size, gen, false, nil, err
}

func newTypesCmd(w io.Writer, dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "types",
		Short: "list the event types of the default catalog and those the store records (docs/EVENTS.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := event.NewCatalog()
			// A --dir (or $SEGLOG_DIR) given must hold a store; without
			// one, the default catalog alone.
			_, fromEnv := os.LookupEnv("SEGLOG_DIR")
			noStore := needStore(*dir)
			if noStore != nil && (cmd.Flags().Changed("dir") || fromEnv) {
				return noStore
			}
			if noStore == nil {
				recorded, err := engine.RecordedTypes(*dir)
				if err != nil {
					return err
				}
				c.Register(recorded...)
			}
			for _, t := range c.Types() {
				if _, err := fmt.Fprintln(w, t); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// holderText names a lease's holder as store.OwnedError does: "process
// 4242 on host "build-1" since 2026-12-07T05:40:00.000Z", what is known of
// it, or "its holder is not recorded".
func holderText(o *store.OwnedError) string {
	var who []string
	if o.PID > 0 {
		who = append(who, fmt.Sprintf("process %d", o.PID))
	}
	if o.Host != "" {
		who = append(who, "on host "+strconv.Quote(o.Host))
	}
	if !o.Since.IsZero() {
		who = append(who, "since "+o.Since.UTC().Format("2006-01-02T15:04:05.000Z"))
	}
	if len(who) == 0 {
		return "its holder is not recorded"
	}
	return strings.Join(who, " ")
}

// turnText says where an open turn stands (store.TurnState): its turn,
// its open step, its pending tool calls.
func turnText(ts store.TurnState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "turn %s is open", ts.Turn)
	if ts.Step != nil {
		fmt.Fprintf(&b, ", in step %s", ts.Step)
	}
	if len(ts.Pending) > 0 {
		fmt.Fprintf(&b, ", %d tool calls pending:", len(ts.Pending))
		for i, c := range ts.Pending {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %s (%s", c.CallID, c.Name)
			if c.Started {
				fmt.Fprintf(&b, ", started at seq %d", c.CallSeq)
			}
			b.WriteByte(')')
		}
	}
	return b.String()
}
