package jetstream

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// procCluster is a 3-node JetStream cluster of real nats-server
// processes (the module's own nats-server, built once per test binary),
// so that a test can stop one with SIGSTOP: a server that stops
// answering without closing any connection, to its clients or to the
// other servers, as a hung or paused machine does (an embedded server
// can only be shut down, which closes them).
type procCluster struct {
	dir   string
	bin   string
	ports [][3]int // client, route, monitor port of each server
	mu    sync.Mutex
	cmds  []*exec.Cmd
	state []procState
}

type procState int

const (
	procRunning procState = iota
	procStopped           // SIGSTOP: silent, its connections open
	procDead              // killed
)

var (
	natsServerOnce sync.Once
	natsServerBin  string
	natsServerErr  error
)

// natsServerBinary builds the nats-server of the module's go.mod (the
// version the embedded servers run) into a directory of its own.
func natsServerBinary() (string, error) {
	natsServerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "seglog-nats-server-")
		if err != nil {
			natsServerErr = err
			return
		}
		bin := filepath.Join(dir, "nats-server")
		goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			goBin = "go"
		}
		cmd := exec.Command(goBin, "build", "-o", bin, "github.com/nats-io/nats-server/v2")
		if out, err := cmd.CombinedOutput(); err != nil {
			natsServerErr = fmt.Errorf("building nats-server: %v\n%s", err, out)
			return
		}
		natsServerBin = bin
	})
	return natsServerBin, natsServerErr
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ls []net.Listener
	var ps []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ps
}

// startProcCluster runs 3 nats-server processes in one cluster and waits
// until each is healthy (JetStream current, a meta leader known).
func startProcCluster(t *testing.T) *procCluster {
	t.Helper()
	bin, err := natsServerBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := &procCluster{dir: t.TempDir(), bin: bin}
	ps := freePorts(t, 9)
	for i := range 3 {
		c.ports = append(c.ports, [3]int{ps[i], ps[3+i], ps[6+i]})
	}
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", c.ports[i][1]))
	}
	for i := range 3 {
		conf := fmt.Sprintf(`server_name: seglog-%d
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
max_payload: 8MB
jetstream {
  store_dir: %q
  sync_interval: always
}
cluster {
  name: seglog
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, i, c.ports[i][0], c.ports[i][2], filepath.Join(c.dir, fmt.Sprintf("seglog-%d", i)), c.ports[i][1], strings.Join(routes, ", "))
		if err := os.WriteFile(c.conf(i), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.cmds = make([]*exec.Cmd, 3)
	c.state = make([]procState, 3)
	t.Cleanup(c.shutdown)
	for i := range 3 {
		c.start(t, i)
	}
	for i := range 3 {
		if !c.waitHealthy(i) {
			t.Fatalf("nats-server seglog-%d not healthy after a minute", i)
		}
	}
	return c
}

func (c *procCluster) conf(i int) string {
	return filepath.Join(c.dir, fmt.Sprintf("seglog-%d.conf", i))
}

func (c *procCluster) start(t *testing.T, i int) {
	t.Helper()
	cmd := exec.Command(c.bin, "-c", c.conf(i))
	log, err := os.Create(filepath.Join(c.dir, fmt.Sprintf("seglog-%d.log", i)))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	log.Close()
	c.mu.Lock()
	c.cmds[i], c.state[i] = cmd, procRunning
	c.mu.Unlock()
}

// waitHealthy waits until server i's health check passes (its JetStream
// current: the meta layer and every stream and consumer it holds), for a
// minute at most.
func (c *procCluster) waitHealthy(i int) bool {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports[i][2])
	hc := &http.Client{Timeout: time.Second}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		r, err := hc.Get(url)
		if err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return true
			}
		}
	}
	return false
}

func (c *procCluster) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.ports[i][0]) }

func (c *procCluster) urls() []string { return []string{c.url(0), c.url(1), c.url(2)} }

// addr is server i's client address if it runs (not stopped or dead),
// else "".
func (c *procCluster) addr(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state[i] != procRunning {
		return ""
	}
	return fmt.Sprintf("127.0.0.1:%d", c.ports[i][0])
}

func (c *procCluster) signal(t *testing.T, i int, sig syscall.Signal, to procState) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.cmds[i].Process.Signal(sig); err != nil {
		t.Fatalf("signal %v to seglog-%d: %v", sig, i, err)
	}
	c.state[i] = to
}

// stop makes server i silent (SIGSTOP): it answers nothing, and closes
// no connection.
func (c *procCluster) stop(t *testing.T, i int) { c.signal(t, i, syscall.SIGSTOP, procStopped) }

// cont lets server i go on (SIGCONT).
func (c *procCluster) cont(t *testing.T, i int) { c.signal(t, i, syscall.SIGCONT, procRunning) }

// kill kills server i (SIGKILL).
func (c *procCluster) kill(t *testing.T, i int) {
	t.Helper()
	c.mu.Lock()
	cmd := c.cmds[i]
	c.state[i] = procDead
	c.mu.Unlock()
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Kill()
	cmd.Wait()
}

// restart starts server i again, with its storage, and waits until it
// is current again, so that a fault after it does not find one server
// dead and one still catching up.
func (c *procCluster) restart(t *testing.T, i int) {
	t.Helper()
	c.start(t, i)
	if !c.waitHealthy(i) {
		t.Logf("seglog-%d restarted but not current after a minute", i)
	}
}

func (c *procCluster) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, cmd := range c.cmds {
		if cmd == nil || c.state[i] == procDead {
			continue
		}
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
		c.state[i] = procDead
	}
}

// serverIndex is the index of the server named name (seglog-<i>), or -1.
func serverIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "seglog-%d", &i); err != nil || i < 0 || i > 2 {
		return -1
	}
	return i
}

// leaderOf is the index of the server leading stream, as the cluster
// reports it over nc, or -1.
func leaderOf(nc *nats.Conn, stream string) int {
	js, err := natsjs.New(nc)
	if err != nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return -1
	}
	return serverIndex(info.Cluster.Leader)
}

// consumerServer is the index of the server running consumer of stream,
// as the cluster reports it over nc, or -1.
func consumerServer(nc *nats.Conn, stream, consumer string) int {
	js, err := natsjs.New(nc)
	if err != nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		return -1
	}
	info := cons.CachedInfo()
	if info == nil || info.Cluster == nil {
		return -1
	}
	return serverIndex(info.Cluster.Leader)
}

// connectedIndex is the index of the server nc is connected to, or -1.
func connectedIndex(c *procCluster, nc *nats.Conn) int {
	u := nc.ConnectedUrl()
	for i := range 3 {
		if strings.HasSuffix(u, fmt.Sprintf(":%d", c.ports[i][0])) {
			return i
		}
	}
	return -1
}
