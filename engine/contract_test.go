package engine_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/vfs"
)

// memBackend runs the engine on a crashable in-memory FS: Restart is a
// power cut that keeps only what was synced.
type memBackend struct {
	t       *testing.T
	catalog *event.Catalog
	surface bool
	clock   *enginetest.Clock
	mem     *vfs.MemFS
	fault   *vfs.FaultFS
}

func (b *memBackend) options() *engine.Options {
	return &engine.Options{FS: b.fault, SegmentSize: 1 << 20, AfterFunc: b.clock.AfterFunc, Catalog: b.catalog, SurfaceRules: b.surface}
}

func (b *memBackend) SetCatalog(c *event.Catalog) { b.catalog = c }

func (b *memBackend) SetSurfaceRules(on bool) { b.surface = on }

func (b *memBackend) Open() (enginetest.Store, error) {
	db, err := engine.OpenStore(b.t, "/db", b.options())
	if err != nil {
		return nil, err
	}
	return enginetest.Local(db), nil
}

func (b *memBackend) Restart(s enginetest.Store, torn bool) (enginetest.Store, error) {
	crashed := b.mem.CrashClone(vfs.CrashConfig{}) // nothing unsynced survives
	s.Close()                                      // the old instance writes to the old FS only
	b.mem, b.fault = crashed, vfs.NewFault(crashed)
	if torn {
		if err := tearTail(b.mem, "/db"); err != nil {
			return nil, err
		}
	}
	return b.Open()
}

func (b *memBackend) FailWrites(on bool) {
	if on {
		b.fault.Add(vfs.Rule{Op: vfs.OpWrite, Nth: 1, Sticky: true})
	} else {
		b.fault.Clear()
	}
}

func (b *memBackend) ExpectProblem(what string) { engine.ExpectProblem(b.t, "/db", what) }

func (b *memBackend) Check() error { return checkStore("/db", &engine.Options{FS: b.mem}) }

// checkStore runs engine.Check on a closed store: any problem is an error.
func checkStore(dir string, opts *engine.Options) error {
	rep, err := engine.Check(dir, opts)
	if err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("check found %d problems: %v", len(rep.Problems), rep.Problems)
	}
	return nil
}

// osBackend runs the engine on the OS with its bbolt index: Restart closes
// the instance cleanly and reopens the directory.
type osBackend struct {
	t       *testing.T
	catalog *event.Catalog
	surface bool
	clock   *enginetest.Clock
	dir     string
}

func (b *osBackend) Open() (enginetest.Store, error) {
	db, err := engine.OpenStore(b.t, b.dir, &engine.Options{SegmentSize: 1 << 20, AfterFunc: b.clock.AfterFunc, Catalog: b.catalog, SurfaceRules: b.surface})
	if err != nil {
		return nil, err
	}
	return enginetest.Local(db), nil
}

// OpenHost opens a second DB on the directory: two DBs in one process
// hold their locks as two processes do.
func (b *osBackend) OpenHost() (enginetest.Store, error) { return b.Open() }

func (b *osBackend) Restart(s enginetest.Store, torn bool) (enginetest.Store, error) {
	if err := s.Close(); err != nil {
		return nil, err
	}
	if torn {
		if err := tearTail(vfs.Default, b.dir); err != nil {
			return nil, err
		}
	}
	return b.Open()
}

func (b *osBackend) SetCatalog(c *event.Catalog) { b.catalog = c }

func (b *osBackend) SetSurfaceRules(on bool) { b.surface = on }

func (b *osBackend) ExpectProblem(what string) { engine.ExpectProblem(b.t, b.dir, what) }

func (b *osBackend) Check() error { return checkStore(b.dir, nil) }

// tearTail writes a torn frame after the last frame of the newest segment.
func tearTail(fsys vfs.FS, dir string) error {
	ids, err := segment.List(fsys, dir)
	if err != nil || len(ids) == 0 {
		return errors.Join(err, errors.New("no segment to tear"))
	}
	path := filepath.Join(dir, segment.Name(ids[len(ids)-1]))
	data, err := vfs.ReadFile(fsys, path)
	if err != nil {
		return err
	}
	res, err := segment.Scan(path, data, segment.ScanOptions{}, nil)
	if err != nil {
		return err
	}
	f, err := fsys.OpenReadWrite(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// The start of a frame header whose length runs past what was written.
	torn := []byte{0x46, 0x52, 0xA7, 0x5E, 1, 0, 1, 0, 0xff, 0xff, 0, 0, 'g', 'a', 'r', 'b'}
	if _, err := f.WriteAt(torn, res.End); err != nil {
		return err
	}
	return f.Sync()
}

func TestContractMem(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		mem := vfs.NewMem()
		return &memBackend{t: t, clock: clock, mem: mem, fault: vfs.NewFault(mem)}
	})
}

func TestContractOS(t *testing.T) {
	enginetest.Run(t, func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		return &osBackend{t: t, clock: clock, dir: t.TempDir()}
	})
}

// TestMain lets the test binary serve as a store in another process
// (enginetest.ServePeer) for TestContractAcrossProcesses.
func TestMain(m *testing.M) {
	enginetest.ServePeer(func(dir string) (enginetest.Store, error) {
		db, err := engine.OpenUnchecked("a peer process serves the store of a test in the parent, which checks it", dir, &engine.Options{CompactInterval: -1})
		if err != nil {
			return nil, err
		}
		return enginetest.Local(db), nil
	})
	os.Exit(m.Run())
}

// TestContractAcrossProcesses: the contract cases whose second instance
// or other handle is in another OS process.
func TestContractAcrossProcesses(t *testing.T) {
	enginetest.RunAcrossProcesses(t, func(t *testing.T, dir string) enginetest.Store {
		db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return enginetest.Local(db)
	})
}

// TestCopy runs the cases of store.Copy from one engine to another: on
// the crashable in-memory FS (a destination restart is a power cut), and
// on the OS (a second host writes a source session).
func TestCopy(t *testing.T) {
	mem := func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		m := vfs.NewMem()
		return &memBackend{t: t, clock: clock, mem: m, fault: vfs.NewFault(m)}
	}
	disk := func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		return &osBackend{t: t, clock: clock, dir: t.TempDir()}
	}
	t.Run("mem", func(t *testing.T) { enginetest.RunCopy(t, mem, mem) })
	t.Run("os", func(t *testing.T) { enginetest.RunCopy(t, disk, disk) })
}
