package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
)

func newTailCmd(w io.Writer, dir *string) *cobra.Command {
	var n int
	var follow bool
	cmd := &cobra.Command{
		Use:   "tail <id>",
		Short: "print a session's last events; -f follows new ones (also while another process writes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			return runTail(ctx, w, *dir, args[0], n, follow, 200*time.Millisecond)
		},
	}
	cmd.Flags().IntVar(&n, "n", 10, "events to print before following")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing events as they are written (the session must exist)")
	return cmd
}

// tailer reads a session's frames straight from the segments, without the
// index and without locks, so it can follow a store another process is
// writing: a frame that is not (yet) complete is simply read again later.
type tailer struct {
	dir     string
	id      string
	seg     uint64 // segment being read
	off     int64  // next frame offset in it
	r       *segment.Reader
	next    uint64 // next seq of the session to emit
	started bool   // the session's header was seen
	sealed  bool   // segment seg was seen sealed
}

// poll returns the session's events written since the last poll.
func (t *tailer) poll() ([]event.Event, error) {
	var out []event.Event
	for {
		ids, err := segment.List(nil, t.dir)
		if err != nil {
			return out, err
		}
		var cur uint64
		for _, id := range ids {
			if id >= t.seg && (cur == 0 || id < cur) {
				cur = id
			}
		}
		if cur == 0 {
			return out, nil
		}
		if cur != t.seg || t.r == nil {
			if t.r != nil {
				t.r.Close()
			}
			r, err := segment.OpenReader(nil, filepath.Join(t.dir, segment.Name(cur)))
			if err != nil {
				return out, err
			}
			t.r, t.seg, t.off, t.sealed = r, cur, segment.HeaderSize, false
		}
		if err := t.r.Remap(); err != nil {
			return out, err
		}
		res, err := t.r.Scan(segment.ScanOptions{From: t.off}, func(fi *segment.FrameInfo) error {
			if string(fi.Key) != t.id {
				return nil
			}
			switch fi.Kind {
			case segment.KindHeader:
				t.started, t.next = true, 0
			case segment.KindDelete:
				t.started, t.next = false, 0
			case segment.KindEvents:
				f, err := t.r.ReadFrame(fi.Offset)
				if err != nil {
					return err
				}
				for _, e := range f.Events {
					if e.Seq >= t.next {
						out = append(out, e)
						t.next = e.Seq + 1
					}
				}
			}
			return nil
		})
		var ce *CorruptionError
		if err != nil && !errors.As(err, &ce) {
			return out, err
		}
		if err == nil {
			t.off = res.End // a torn (in-flight) tail is read again next time
			if res.Sealed {
				// Remembered: the next scan starts past the seal frame and
				// would not see it again.
				t.sealed = true
			}
		}
		if !t.sealed || !containsAfter(ids, t.seg) {
			return out, err
		}
		t.seg++ // sealed: go on with the next segment
		t.sealed = false
		t.r.Close()
		t.r = nil
	}
}

func containsAfter(ids []uint64, seg uint64) bool {
	for _, id := range ids {
		if id > seg {
			return true
		}
	}
	return false
}

// CorruptionError is engine's, as segment reports it.
type CorruptionError = segment.CorruptionError

// runTail prints the last n events of session id and, with follow, the
// events written after them until ctx ends. A session that is not in the
// store (never created, or deleted) is an error, with follow too: tail
// follows a session, it does not wait for one to appear.
func runTail(ctx context.Context, w io.Writer, dir, id string, n int, follow bool, every time.Duration) error {
	if err := needStore(dir); err != nil {
		return err
	}
	t := &tailer{dir: dir, id: id, seg: 1}
	defer func() {
		if t.r != nil {
			t.r.Close()
		}
	}()
	enc := json.NewEncoder(w)
	evs, err := t.poll()
	if err != nil {
		return err
	}
	if !t.started {
		return &engine.SessionError{ID: id, Op: "tail", Err: engine.ErrSessionNotFound}
	}
	if n >= 0 && len(evs) > n {
		evs = evs[len(evs)-n:]
	}
	for {
		for i := range evs {
			if err := enc.Encode(&evs[i]); err != nil {
				return err
			}
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
		if evs, err = t.poll(); err != nil {
			return err
		}
	}
}
