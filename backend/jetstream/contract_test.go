package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// One embedded server for the package's tests; each test uses streams and
// buckets of its own names.
var (
	srv     *embedded.Server
	srvURL  string
	nameSeq atomic.Int64
	lockDir string // Options.LockDir of every test's stores
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "seglog-nats-")
	if err != nil {
		panic(err)
	}
	srv, err = embedded.Start(dir)
	if err != nil {
		panic(err)
	}
	srvURL = srv.ClientURL()
	lockDir = filepath.Join(dir, "locks")
	if err := os.Mkdir(lockDir, 0o755); err != nil {
		panic(err)
	}
	code := m.Run()
	if natsServerBin != "" { // (built by the tests of nats-server processes)
		os.RemoveAll(filepath.Dir(natsServerBin))
	}
	stopCluster()
	srv.Shutdown()
	srv.WaitForShutdown()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freshOptions names a stream, prefix and lease bucket no other test uses.
func freshOptions() *Options {
	n := nameSeq.Add(1)
	return &Options{
		Stream:      fmt.Sprintf("T%d", n),
		Prefix:      fmt.Sprintf("t%d", n),
		LeaseBucket: fmt.Sprintf("L%d", n),
		Create:      true,
		Host:        "test-host",
		LockDir:     lockDir,
		// Each request's bound: the default 5 s is too short for a server
		// that fsyncs every message on a CI machine whose other packages'
		// tests load the disk (a read open's message get of a 1 MiB
		// message once took longer). Tests of a server that does not
		// answer set their own.
		Timeout: 30 * time.Second,
	}
}

func connect(t testing.TB, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// backend is the suite's Backend: a restart abandons the store as a crash
// of its process would and opens a new instance under the same host name
// over the same stream.
type backend struct {
	t    *testing.T
	nc   *nats.Conn
	opts *Options
	cur  *Store
}

func (b *backend) Open() (enginetest.Store, error) {
	st, err := Open(context.Background(), b.nc, b.opts)
	if err != nil {
		return nil, err
	}
	b.cur = st
	b.t.Cleanup(func() { st.Close() })
	return store.Wrap[*Handle](st), nil
}

// OpenHost opens a store of another host over the same stream and bucket.
func (b *backend) OpenHost() (enginetest.Store, error) {
	o := *b.opts
	o.Host = fmt.Sprintf("other-host-%d", nameSeq.Add(1))
	st, err := Open(context.Background(), b.nc, &o)
	if err != nil {
		return nil, err
	}
	b.t.Cleanup(func() { st.Close() })
	return store.Wrap[*Handle](st), nil
}

// Restart ignores torn: a JetStream message is stored whole or not at
// all, so a crash cannot leave a torn batch (the case still checks that
// the flushed log reads back and grows).
func (b *backend) Restart(s enginetest.Store, torn bool) (enginetest.Store, error) {
	st, ok := store.Unwrap[*Store](s)
	if !ok {
		return nil, errors.New("not a store of this backend")
	}
	st.abandon()
	return b.Open()
}

func (b *backend) FailWrites(on bool) { b.cur.failWrites(on) }

func (b *backend) SetCatalog(c *event.Catalog) { b.opts.Catalog = c }

func (b *backend) SetSurfaceRules(on bool) { b.opts.SurfaceRules = on }

func TestContract(t *testing.T) {
	nc := connect(t, srvURL)
	enginetest.Run(t, func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		o := freshOptions()
		o.AfterFunc = clock.AfterFunc
		return &backend{t: t, nc: nc, opts: o}
	})
}
