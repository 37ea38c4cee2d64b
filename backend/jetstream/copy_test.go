package jetstream

import (
	"fmt"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
)

// localBackend is the local engine on a directory, for the copies between
// it and a stream: Restart closes and reopens; OpenHost opens a second DB
// on the directory (another process, as far as the engine's locks go).
type localBackend struct {
	t     *testing.T
	clock *enginetest.Clock
	dir   string
}

func (b *localBackend) Open() (enginetest.Store, error) {
	db, err := enginetest.OpenStore(b.t, b.dir, &engine.Options{SegmentSize: 1 << 20, AfterFunc: b.clock.AfterFunc, CompactInterval: -1})
	if err != nil {
		return nil, err
	}
	return enginetest.Local(db), nil
}

func (b *localBackend) OpenHost() (enginetest.Store, error) { return b.Open() }

func (b *localBackend) Restart(s enginetest.Store, _ bool) (enginetest.Store, error) {
	if err := s.Close(); err != nil {
		return nil, err
	}
	return b.Open()
}

func (b *localBackend) Check() error {
	rep, err := engine.Check(b.dir, nil)
	if err == nil && len(rep.Problems) > 0 {
		err = fmt.Errorf("check found %d problems: %v", len(rep.Problems), rep.Problems)
	}
	return err
}

// TestCopy runs the cases of store.Copy between a local store and a
// stream, both ways, and between two streams.
func TestCopy(t *testing.T) {
	nc := connect(t, srvURL)
	js := func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		o := freshOptions()
		o.AfterFunc = clock.AfterFunc
		return &backend{t: t, nc: nc, opts: o}
	}
	local := func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		return &localBackend{t: t, clock: clock, dir: t.TempDir()}
	}
	t.Run("local-to-jetstream", func(t *testing.T) { enginetest.RunCopy(t, local, js) })
	t.Run("jetstream-to-local", func(t *testing.T) { enginetest.RunCopy(t, js, local) })
	t.Run("jetstream-to-jetstream", func(t *testing.T) { enginetest.RunCopy(t, js, js) })
}
