package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
)

// The reference model of the multi-process workloads: the reference
// harness's layout (jsonl: <root>/<project>/<id>/session.v3.jsonl,
// a header line, a JSON line per event), one file per session, an
// exclusive flock on it held as the session's write lease for as long as
// the session is open, and a write + fdatasync of its file per flush, as
// the jsonl peer (bench/peers) does. Each process writes its own files.

// appender is what a worker of MultiDurable needs of a session.
type appender interface {
	Append(ctx context.Context, evs ...event.Event) error
	Flush(ctx context.Context) error
	Close() error
}

type jsonlSession struct {
	f       *os.File
	pending []byte
}

// createJSONL creates the log of session id under root, takes its flock
// and makes the header line durable.
func createJSONL(root, id string) (*jsonlSession, error) {
	h := jsonlHeader(id)
	p, err := jsonl.LogPath(root, h, false)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: flock %s: %w", p, err)
	}
	s := &jsonlSession{f: f, pending: jsonl.HeaderLine(h)}
	if err := s.Flush(context.Background()); err != nil {
		f.Close()
		return nil, err
	}
	return s, syncDir(filepath.Dir(p))
}

// jsonlHeader is the header createJSONL writes for session id.
func jsonlHeader(id string) store.Header { return store.Header{ID: id, CreatedAt: 1} }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Append buffers the events' lines; Flush writes them and fdatasyncs.
func (s *jsonlSession) Append(_ context.Context, evs ...event.Event) error {
	for i := range evs {
		s.pending = append(s.pending, jsonl.EventLine(&evs[i])...)
	}
	return nil
}

func (s *jsonlSession) Flush(context.Context) error {
	if err := s.write(); err != nil {
		return err
	}
	return unix.Fdatasync(int(s.f.Fd()))
}

// write writes the buffered lines, without a sync.
func (s *jsonlSession) write() error {
	if len(s.pending) > 0 {
		if _, err := s.f.Write(s.pending); err != nil {
			return err
		}
		s.pending = s.pending[:0]
	}
	return nil
}

// Close releases the flock with the file.
func (s *jsonlSession) Close() error { return s.f.Close() }
