package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is one embedded NATS server.
type Server struct {
	*server.Server
	opts *server.Options
}

// Start runs a single JetStream server storing in dir.
func Start(dir string) (*Server, error) {
	return start(&server.Options{ServerName: "seglog-0", StoreDir: dir})
}

// StartWith runs a single JetStream server storing in dir, with the
// options edit sets (users and their permissions, for instance).
func StartWith(dir string, edit func(*server.Options)) (*Server, error) {
	o := &server.Options{ServerName: "seglog-0", StoreDir: dir}
	edit(o)
	return start(o)
}

func start(o *server.Options) (*Server, error) {
	o.Host = "127.0.0.1"
	if o.Port == 0 {
		o.Port = -1 // a free port
	}
	o.JetStream = true
	o.SyncAlways = true
	o.NoLog, o.NoSigs = true, true
	o.MaxPayload = 8 << 20
	s, err := server.NewServer(o)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded: the server did not start")
	}
	return &Server{Server: s, opts: o}, nil
}

// Restart starts the server again after Shutdown, with the same name,
// ports and storage (a cluster member coming back).
func (s *Server) Restart() (*Server, error) {
	o := s.opts.Clone()
	o.Port = s.opts.Port
	if s.Addr() != nil {
		o.Port = s.Addr().(*net.TCPAddr).Port
	}
	return start(o)
}

// Cluster is several embedded servers forming one JetStream cluster.
type Cluster struct {
	Servers []*Server
}

// StartCluster runs n servers (n >= 3 for replicas of 3) in one cluster,
// each storing under dir/<name>, and waits until JetStream has a leader
// that knows all n.
func StartCluster(dir string, n int) (*Cluster, error) {
	ports := make([]int, 2*n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	var routes []*url.URL
	for i := range n {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[n+i])})
	}
	c := &Cluster{}
	for i := range n {
		name := fmt.Sprintf("seglog-%d", i)
		s, err := start(&server.Options{
			ServerName: name,
			StoreDir:   filepath.Join(dir, name),
			Port:       ports[i],
			Cluster:    server.ClusterOpts{Name: "seglog", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:     routes,
		})
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	// Ready when the metadata leader sees every server as a JetStream
	// peer: a stream of n replicas can then be placed.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.Servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				return c, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.Shutdown()
	return nil, fmt.Errorf("embedded: the cluster of %d has no JetStream leader that sees every peer", n)
}

// URLs returns the client URLs of the running servers, comma-separated, for
// nats.Connect.
func (c *Cluster) URLs() string {
	var us []string
	for _, s := range c.Servers {
		if s.Running() {
			us = append(us, s.ClientURL())
		}
	}
	return strings.Join(us, ",")
}

// StreamLeader returns the index of the server leading stream (in the
// global account), or -1.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Servers {
		if s.Running() && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// ConsumerLeader returns the index of the server running consumer of
// stream (in the global account), or -1.
func (c *Cluster) ConsumerLeader(stream, consumer string) int {
	for i, s := range c.Servers {
		if s.Running() && s.JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream, consumer) {
			return i
		}
	}
	return -1
}

// Shutdown stops every server.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
		s.WaitForShutdown()
	}
}
