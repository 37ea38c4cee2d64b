package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/seglog/seglog/store"
	"github.com/spf13/cobra"
)

func newTailCmd(w io.Writer, dir *string) *cobra.Command {
	var n int
	var follow bool
	cmd := &cobra.Command{
		Use:   "tail <id>",
		Short: "print a session's last events; -f follows new ones (also while another process writes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			// Interrupted (Ctrl-C) or stopped (SIGTERM: timeout, systemd,
			// kill), -f ends as it began: exit 0.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runTail(ctx, w, *dir, args[0], n, follow)
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 10, "events to print before following")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they are written (the session must exist)")
	return cmd
}

// runTail prints the last n events of session id and, with follow, the
// events written after them until ctx ends. A session that is not in the
// store (never created, or deleted) is an error, with follow too: tail
// follows a session, it does not wait for one to appear.
func runTail(ctx context.Context, w io.Writer, dir, id string, n int, follow bool) error {
	db, err := openRO(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	h, err := db.Open(ctx, id, store.Read)
	if err != nil {
		return err
	}
	defer h.Close()
	snap, err := db.Stat(ctx, id)
	if err != nil {
		return err
	}
	from := 0
	if n >= 0 && snap.EventCount > uint64(n) {
		from = int(snap.EventCount) - n
	}
	enc := json.NewEncoder(w)
	for {
		evs, err := h.Read(ctx, from, -1)
		if err != nil {
			return err
		}
		for i := range evs {
			if err := enc.Encode(&evs[i]); err != nil {
				return err
			}
		}
		from += len(evs)
		if !follow {
			return nil
		}
		if _, err := h.Wait(ctx, uint64(from)); err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the normal end of tail -f
			}
			return err
		}
	}
}
