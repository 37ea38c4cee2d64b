package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"syscall"

	"github.com/seglog/seglog/store"
	"github.com/spf13/cobra"
)

func newChangesCmd(w io.Writer, dir *string) *cobra.Command {
	var from, addr string
	var follow, asJSON bool
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "changes",
		Short: "print the store's change feed (creates, appends, forks, deletes) from a cursor; --follow waits for more",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			// Interrupted (Ctrl-C) or stopped (SIGTERM), --follow ends as
			// it began: exit 0.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if addr != "" && !isNATS(addr) {
				return usageError{fmt.Errorf("changes --nats %s: not a NATS address (nats://host:4222)", addr)}
			}
			return runChanges(ctx, w, *dir, addr, &nf, store.Cursor(from), follow, asJSON)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the cursor to resume after (printed with each change); default: the start")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing changes as they become durable, in any process, until interrupted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line (kind, session, cursor, header, parent, n, seq, events)")
	cmd.Flags().StringVar(&addr, "nats", "", "the store is this JetStream stream (nats://host:4222[?stream=S&prefix=P&leases=B]), not --dir")
	nf.add(cmd)
	return cmd
}

// runChanges prints the changes of the store in dir, or of the stream at
// NATS address addr if set, from cursor from on.
func runChanges(ctx context.Context, w io.Writer, dir, addr string, nf *natsFlags, from store.Cursor, follow, asJSON bool) error {
	var db interface {
		Changes(context.Context, store.Cursor, ...store.ChangesOption) iter.Seq2[store.Change, error]
	}
	if addr != "" {
		t, err := openTarget(ctx, addr, nf, false, true)
		if err != nil {
			return err
		}
		defer t.close()
		db = t.s
	} else {
		e, err := openRO(dir)
		if err != nil {
			return err
		}
		defer e.Close()
		db = e
	}
	var opts []store.ChangesOption
	if follow {
		opts = append(opts, store.Follow())
	}
	enc := json.NewEncoder(w)
	for c, err := range db.Changes(ctx, from, opts...) {
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil // interrupted: the normal end of --follow
			}
			return err
		}
		if asJSON {
			err = enc.Encode(&c)
		} else {
			err = printChange(w, &c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// printChange prints c as one line: its cursor, kind, session and what
// it did.
func printChange(w io.Writer, c *store.Change) error {
	var what string
	switch c.Kind {
	case store.ChangeCreate:
		what = fmt.Sprintf("cwd=%q", c.Header.Cwd)
	case store.ChangeFork:
		what = fmt.Sprintf("parent=%q n=%d", c.Parent, c.N)
	case store.ChangeAppend:
		what = fmt.Sprintf("seq=%d..%d", c.Seq, c.Seq+uint64(len(c.Events))-1)
		if len(c.Events) == 1 {
			what = fmt.Sprintf("seq=%d", c.Seq)
		}
	}
	_, err := fmt.Fprintf(w, "%s\t%s\t%q\t%s\n", c.Cursor, c.Kind, c.Session, what)
	return err
}
