package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/seglog/seglog/backend/jetstream"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// natsFlags are the JetStream settings of the commands that reach a
// stream (copy, retain): the defaults of backend/jetstream's Options.
type natsFlags struct {
	stream, prefix, leases, creds string
	create                        bool
}

func (f *natsFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.stream, "stream", "SEGLOG", "the JetStream stream of the sessions (a NATS address's ?stream= overrides it)")
	cmd.Flags().StringVar(&f.prefix, "subject-prefix", "seglog", "the subject prefix of the sessions in the stream (?prefix=)")
	cmd.Flags().StringVar(&f.leases, "lease-bucket", "SEGLOG_LEASES", "the key-value bucket of the write leases (?leases=)")
	cmd.Flags().StringVar(&f.creds, "creds", "", "a NATS credentials file (else the address's user:password@ or token@, if any)")
}

// isNATS reports whether addr names a NATS server (a URL of a NATS
// scheme; a comma-separated list of them names a cluster), not a
// directory.
func isNATS(addr string) bool {
	for _, scheme := range []string{"nats://", "tls://", "ws://", "wss://"} {
		if strings.HasPrefix(addr, scheme) {
			return true
		}
	}
	return false
}

// target is an open store of a command: a local directory or a stream.
type target struct {
	s     store.Store
	close func() error
	db    *engine.DB // the local store, if it is one
}

// openTarget opens the store addr names: a directory (which must hold a
// store unless create) or a NATS address, servers[?stream=S&prefix=P&
// leases=B], whose stream and lease bucket must exist unless create and
// f.create (--create).
// Events of every type are read and written as stored (an inspector's
// catalog: a copy holds what the source holds).
func openTarget(ctx context.Context, addr string, f *natsFlags, create, readOnly bool) (*target, error) {
	if !isNATS(addr) {
		if !create || readOnly {
			if err := needStore(addr); err != nil {
				return nil, err
			}
		}
		// (Dense: a copy is a bulk load, which nobody waits for frame by
		// frame.)
		db, err := engine.Open(addr, &engine.Options{ReadOnly: readOnly, Catalog: event.AnyCatalog(), CompactInterval: -1, Dense: true})
		if err != nil {
			return nil, err
		}
		return &target{s: store.Wrap[*engine.Handle](db), close: db.Close, db: db}, nil
	}
	servers, query, _ := strings.Cut(addr, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", addr, err)}
	}
	o := &jetstream.Options{Stream: f.stream, Prefix: f.prefix, LeaseBucket: f.leases, Create: create && f.create, Catalog: event.AnyCatalog()}
	for k, v := range q {
		switch k {
		case "stream":
			o.Stream = v[0]
		case "prefix":
			o.Prefix = v[0]
		case "leases":
			o.LeaseBucket = v[0]
		default:
			return nil, usageError{fmt.Errorf("%s: unknown setting %q (stream, prefix, leases)", addr, k)}
		}
	}
	opts := []nats.Option{nats.Name("seglog")}
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	nc, err := nats.Connect(servers, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", servers, err)
	}
	st, err := jetstream.Open(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", servers, err)
	}
	return &target{s: store.Wrap[*jetstream.Handle](st), close: func() error {
		err := st.Close()
		nc.Close()
		return err
	}}, nil
}

func newCopyCmd(w io.Writer, dir *string) *cobra.Command {
	var from, to string
	var asJSON bool
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "copy --to DIR|nats://... [--from DIR|nats://...] [<id>...]",
		Short: "copy sessions from one store to another: a directory or a NATS JetStream stream, either way; safe to run again",
		RunE: func(cmd *cobra.Command, ids []string) error {
			if to == "" {
				return usageError{errors.New("copy needs --to (a store directory or a NATS address)")}
			}
			if from == "" {
				from = *dir
			}
			if from == to {
				return usageError{fmt.Errorf("copy --from and --to name the same store, %s", from)}
			}
			if len(ids) == 0 {
				ids = nil
			}
			return runCopy(w, newProgress(cmd.ErrOrStderr()), from, to, ids, &nf, asJSON)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the source: a store directory (default --dir) or a NATS address (nats://host:4222[,nats://...][?stream=S&prefix=P&leases=B])")
	cmd.Flags().StringVar(&to, "to", "", "the destination: a store directory (created if missing) or a NATS address")
	cmd.Flags().BoolVar(&nf.create, "create", false, "create the destination's stream and lease bucket if missing (needs the rights to)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as one JSON object (docs: docs/CLI.md, CLI output)")
	nf.add(cmd)
	return cmd
}

// copyJSON is copy --json's output.
type copyJSON struct {
	Sessions []copySessionJSON `json:"sessions"`
	Failed   int               `json:"failed"`
}

type copySessionJSON struct {
	ID     string `json:"id"`
	Status string `json:"status"` // created, forked, resumed, up-to-date, ahead, gone, failed
	Events uint64 `json:"events"`
	Copied uint64 `json:"copied"`
	Error  string `json:"error,omitempty"`
}

// runCopy copies the sessions ids (nil: all) from the store from to the
// store to (a directory, created if missing, or a NATS address), a line
// per session on w (or one JSON object at the end). A session that fails
// is listed and the others are copied; then it returns a partialError.
func runCopy(w io.Writer, prog *progress, from, to string, ids []string, nf *natsFlags, asJSON bool) error {
	ctx := context.Background()
	src, err := openTarget(ctx, from, nf, false, true)
	if err != nil {
		return fmt.Errorf("copy --from: %w", err)
	}
	defer src.close()
	dst, err := openTarget(ctx, to, nf, true, false)
	if err != nil {
		return fmt.Errorf("copy --to: %w", err)
	}
	defer dst.close()
	if src.db != nil && dst.db != nil {
		// The host types the source records, recorded at the destination
		// too: its hosts then read the copies.
		if types, err := engine.RecordedTypes(from); err != nil {
			return err
		} else if len(types) > 0 {
			if err := dst.db.RegisterTypes(ctx, types...); err != nil {
				return fmt.Errorf("copy --to: %w", err)
			}
		}
	}
	total := len(ids)
	if ids == nil {
		snaps, err := src.s.List(ctx)
		if err != nil {
			return err
		}
		total = len(snaps)
	}
	task := prog.start("copy", total, "sessions", false)
	defer task.end(true)
	out := prog.guard(w)
	var rep copyJSON
	done := 0
	start := time.Now()
	var events uint64
	_, err = store.Copy(ctx, dst.s, src.s, store.CopyOptions{IDs: ids, Done: func(r store.CopyResult) {
		done++
		task.set(done)
		s := copySessionJSON{ID: r.ID, Status: r.Status.String(), Events: r.Events, Copied: r.Copied}
		if r.Err != nil {
			s.Error = untag(r.Err.Error())
			rep.Failed++
		}
		events += r.Copied
		rep.Sessions = append(rep.Sessions, s)
		if asJSON {
			return
		}
		switch r.Status {
		case store.CopyCreated, store.CopyForked:
			fmt.Fprintf(out, "%s: %s, %d events\n", r.ID, r.Status, r.Events)
		case store.CopyResumed:
			fmt.Fprintf(out, "%s: resumed, %d events more (%d)\n", r.ID, r.Copied, r.Events)
		case store.CopyUpToDate:
			fmt.Fprintf(out, "%s: up to date, %d events\n", r.ID, r.Events)
		case store.CopyAhead:
			fmt.Fprintf(out, "%s: the destination holds its %d events and more, left as it is\n", r.ID, r.Events)
		case store.CopyGone:
			fmt.Fprintf(out, "%s: not at the source (deleted meanwhile?), skipped\n", r.ID)
		default:
			fmt.Fprintf(out, "not copied: %s\n", untag(r.Err.Error()))
		}
	}})
	task.end(err != nil)
	if err != nil && rep.Failed == 0 {
		return err // (the listing, not a session)
	}
	if cerr := dst.close(); cerr != nil {
		return fmt.Errorf("copy --to: %w", cerr)
	}
	if asJSON {
		if rep.Sessions == nil {
			rep.Sessions = []copySessionJSON{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "%d sessions, %d events written, in %.2fs\n", len(rep.Sessions), events, time.Since(start).Seconds())
	}
	if rep.Failed > 0 {
		return partialError{fmt.Sprintf("copy: %d of %d sessions not copied (listed); the others were", rep.Failed, len(rep.Sessions))}
	}
	return nil
}

func newRetainCmd(w io.Writer, dir *string) *cobra.Command {
	var p store.RetainPolicy
	var addr string
	var asJSON bool
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "retain (--older-than D | --keep N) [--prefix P] [--cwd DIR] [--dry-run] [--nats URL]",
		Short: "delete the sessions a retention policy selects (by age of the last update, by count), skipping those a host writes",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			switch {
			case p.OlderThan < 0 || p.Keep < 0 || p.TombstonesOlderThan < 0:
				return usageError{errors.New("retain: --older-than, --keep and --tombstones-older-than cannot be negative")}
			case p.OlderThan == 0 && p.Keep == 0:
				return usageError{errors.New("retain needs --older-than or --keep (or both)")}
			}
			if addr == "" {
				addr = *dir
				p.TombstonesOlderThan = 0 // (the local engine's compaction reclaims its tombstones)
			} else if !isNATS(addr) {
				return usageError{fmt.Errorf("retain --nats %s: not a NATS address (nats://host:4222)", addr)}
			}
			return runRetain(w, addr, &nf, p, asJSON)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&p.OlderThan, "older-than", 0, "delete the sessions last updated longer ago than this (720h: 30 days)")
	f.IntVar(&p.Keep, "keep", 0, "keep at most this many sessions, the most recently updated; delete the others")
	f.StringVar(&p.Prefix, "prefix", "", "consider only the sessions whose ID starts with this")
	f.StringVar(&p.Cwd, "cwd", "", "consider only the sessions whose header's cwd is this")
	f.BoolVar(&p.DryRun, "dry-run", false, "delete nothing: list what would be deleted")
	f.DurationVar(&p.TombstonesOlderThan, "tombstones-older-than", 24*time.Hour, "on a stream: purge the tombstones of sessions deleted longer ago than this (0: keep them)")
	f.StringVar(&addr, "nats", "", "the store is this JetStream stream (nats://host:4222[?stream=S&prefix=P&leases=B]), not --dir")
	f.BoolVar(&asJSON, "json", false, "print the outcome as one JSON object (docs: docs/CLI.md, CLI output)")
	nf.add(cmd)
	return cmd
}

// retainJSON is retain --json's output.
type retainJSON struct {
	DryRun     bool                `json:"dryRun"`
	Considered int                 `json:"considered"`
	Deleted    []string            `json:"deleted"`
	Held       []string            `json:"held"`
	Changed    []string            `json:"changed"`
	Failed     []retainFailJSON    `json:"failed"`
	Tombstones *tombstoneCountJSON `json:"tombstones"`
}

type retainFailJSON struct {
	ID    string `json:"id"`
	Error string `json:"error"`
}

type tombstoneCountJSON struct {
	Purged []string `json:"purged"`
	Young  int      `json:"young"`
	Held   []string `json:"held"`
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runRetain applies policy p to the store at addr (a directory or a NATS
// address) and prints what it did.
func runRetain(w io.Writer, addr string, nf *natsFlags, p store.RetainPolicy, asJSON bool) error {
	ctx := context.Background()
	t, err := openTarget(ctx, addr, nf, false, false)
	if err != nil {
		return err
	}
	defer t.close()
	rep, err := store.Retain(ctx, t.s, p)
	if err != nil && len(rep.Failed) == 0 {
		return err
	}
	if cerr := t.close(); cerr != nil {
		return cerr
	}
	out := retainJSON{DryRun: p.DryRun, Considered: rep.Considered, Deleted: orEmpty(rep.Deleted), Held: orEmpty(rep.Held),
		Changed: orEmpty(rep.Changed), Failed: []retainFailJSON{}}
	for _, f := range rep.Failed {
		out.Failed = append(out.Failed, retainFailJSON{f.ID, untag(f.Err.Error())})
	}
	if ts := rep.Tombstones; ts != nil {
		out.Tombstones = &tombstoneCountJSON{Purged: orEmpty(ts.Purged), Young: ts.Young, Held: orEmpty(ts.Held)}
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		verb := "deleted"
		if p.DryRun {
			verb = "would delete"
		}
		for _, id := range rep.Deleted {
			fmt.Fprintln(w, verb, id)
		}
		for _, id := range rep.Held {
			fmt.Fprintln(w, "held by a writer, skipped:", id)
		}
		for _, id := range rep.Changed {
			fmt.Fprintln(w, "written since it was listed, skipped:", id)
		}
		for _, f := range out.Failed {
			fmt.Fprintf(w, "not deleted: %s: %s\n", f.ID, f.Error)
		}
		fmt.Fprintf(w, "%d sessions considered, %d %s, %d skipped\n", rep.Considered, len(rep.Deleted), verb, len(rep.Held)+len(rep.Changed))
		if ts := rep.Tombstones; ts != nil {
			fmt.Fprintf(w, "tombstones: %d %s, %d within the grace period, %d held\n", len(ts.Purged), map[bool]string{true: "would be purged", false: "purged"}[p.DryRun], ts.Young, len(ts.Held))
		}
	}
	if len(rep.Failed) > 0 {
		return partialError{fmt.Sprintf("retain: %d of the sessions chosen not deleted (listed)", len(rep.Failed))}
	}
	return nil
}
