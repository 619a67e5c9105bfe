// Package natscluster starts a real NATS JetStream cluster for tests and demos: N nats-server
// nodes, each a separate OS process ('pctl nats-server -c FILE', the nats-server built into the
// pctl binary), on random 127.0.0.1 ports with their own data directories. Faults are therefore
// real: Kill sends SIGKILL, Stop and Cont send SIGSTOP and SIGCONT, Restart starts a node again on
// its ports and data.
//
//	c := natscluster.Start(t, natscluster.Options{Nodes: 3})
//	b, _ := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), Replicas: 3})
//	leader, _ := c.StreamLeader(ctx, "pctl-orders-0")
//	c.Kill(leader)
//	...
//	c.Restart(leader)
//	c.WaitHealthy(ctx)
//
// Every node trusts one NKey user with full permissions, whose seed file is Creds() (what
// 'pctl serve --nats URLS --creds FILE' needs); Options.Users adds more. The binary is
// Options.Bin, else $PCTL_BIN, else this module's ./cmd/pctl built once per process (see Binary).
//
// A Cluster is safe for concurrent use: a fault schedule may kill nodes while checkers ask for
// leaders. Node indexes are 0-based; node i is named "n<i+1>" (its server_name).
package natscluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/internal/natsconf"
	"pctl.dev/pctl/internal/netproxy"
)

// Options configures a cluster. The zero value is 3 nodes, JetStream with sync_interval always,
// max_payload 16 MiB, data in a temporary directory.
type Options struct {
	// Nodes is the cluster size. Default 3.
	Nodes int
	// Dir holds every node's configuration, data and log. Default: the test's TempDir (Start), or
	// a new temporary directory that Close removes (New).
	Dir string
	// Bin is the pctl binary to run. Default: $PCTL_BIN, else Binary().
	Bin string
	// SyncInterval is JetStream's sync_interval. Default "always"; "default" leaves nats-server's
	// own (2 minutes).
	SyncInterval string
	// MaxPayload in bytes. Default 16 MiB (pctl's plugins travel in one message).
	MaxPayload int
	// Users are NKey users every node accepts besides the full-permission one of Creds().
	Users []natsconf.User
	// ProxiedRoutes sends every route between two nodes through a loopback TCP proxy of its own
	// (package netproxy), so that CutRoutes, Isolate and Heal can partition the cluster. Nodes
	// then advertise no usable route address, so that gossip never opens a route around the
	// proxies.
	ProxiedRoutes bool
	// Extra is appended to every node's configuration file.
	Extra string
	// Logf, if set, receives the harness's own log lines (starts, kills, restarts).
	Logf func(format string, args ...any)
	// StartTimeout bounds the wait for a node to come up. Default 30s.
	StartTimeout time.Duration
}

// TB is the part of testing.TB that Start uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
}

// Cluster is a running cluster. Close stops it.
type Cluster struct {
	opts    Options
	dir     string
	rmDir   bool
	bin     string
	creds   string
	nodes   []*node
	logf    func(string, ...any)
	closeMu sync.Mutex
	closed  bool

	connMu sync.Mutex
	conn   *nats.Conn // for JetStream API requests (StreamLeader)

	proxies map[[2]int]*netproxy.Proxy // [from, to] -> the proxy of from's route to to

	cutMu sync.Mutex
	cut   map[[2]int]bool // [i, j] with i < j: CutRoutes(i, j) is in force
}

type node struct {
	idx                   int
	name                  string
	port, cport, httpPort int
	dir, conf, log        string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	stopped bool          // SIGSTOPped by Stop
}

// Start starts a cluster for a test: it fails the test when the cluster does not come up, and
// stops it at the end of the test (printing the end of every node's log when the test failed).
func Start(tb TB, opts Options) *Cluster {
	tb.Helper()
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = tb.Logf
	}
	c, err := New(opts)
	if err != nil {
		tb.Fatalf("natscluster: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			for i := range c.nodes {
				tb.Logf("natscluster: last lines of %s's log (%s):\n%s", c.Name(i), c.nodes[i].log, c.LogTail(i, 15))
			}
		}
		c.Close()
	})
	return c
}

// New starts a cluster and waits until it is healthy (every node up, a meta leader elected).
func New(opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("%d nodes", opts.Nodes)
	}
	if opts.SyncInterval == "" {
		opts.SyncInterval = "always"
	} else if opts.SyncInterval == "default" {
		opts.SyncInterval = ""
	}
	if opts.MaxPayload == 0 {
		opts.MaxPayload = 16 << 20
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	c := &Cluster{opts: opts, logf: opts.Logf}
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
	var err error
	if c.bin, err = binFor(opts.Bin); err != nil {
		return nil, err
	}
	c.dir = opts.Dir
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "natscluster-"); err != nil {
			return nil, err
		}
		c.rmDir = true
	}
	if c.creds, err = writeUser(filepath.Join(c.dir, "full.nk")); err != nil {
		c.cleanupDir()
		return nil, err
	}
	// A port another process takes between our pick and the node's bind shows up as a node that
	// does not start: pick new ports and try again.
	for attempt := 1; ; attempt++ {
		err = c.startAll()
		if err == nil {
			break
		}
		c.killAll()
		if attempt == 3 || !errors.Is(err, errPortInUse) {
			c.cleanupDir()
			return nil, err
		}
		c.logf("natscluster: %v; picking new ports", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

var errPortInUse = errors.New("a port was taken by another process")

func (c *Cluster) startAll() error {
	n := c.opts.Nodes
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	c.nodes = make([]*node, n)
	c.proxies = nil
	for i := range c.nodes {
		nd := &node{idx: i, name: fmt.Sprintf("n%d", i+1), port: ports[3*i], cport: ports[3*i+1], httpPort: ports[3*i+2]}
		nd.dir = filepath.Join(c.dir, nd.name)
		nd.conf = filepath.Join(c.dir, nd.name+".conf")
		nd.log = filepath.Join(c.dir, nd.name+".log")
		c.nodes[i] = nd
	}
	pub, err := publicKey(c.creds)
	if err != nil {
		return err
	}
	users := append([]natsconf.User{{Comment: "natscluster: full permissions", NKey: pub}}, c.opts.Users...)
	for i, nd := range c.nodes {
		cfg := natsconf.Node{
			Name: nd.name, Host: "127.0.0.1", Port: nd.port, HTTPPort: nd.httpPort,
			StoreDir: nd.dir, SyncInterval: c.opts.SyncInterval, MaxPayload: c.opts.MaxPayload,
			Users: users, Extra: c.opts.Extra,
		}
		if n > 1 {
			cfg.ClusterName, cfg.ClusterPort = "natscluster", nd.cport
			cfg.RouteUser, cfg.RoutePassword = "route", "natscluster"
			for j, other := range c.nodes {
				if j == i {
					continue
				}
				target := fmt.Sprintf("127.0.0.1:%d", other.cport)
				if c.opts.ProxiedRoutes {
					px, err := netproxy.New(target)
					if err != nil {
						return fmt.Errorf("route proxy from %s to %s: %w", nd.name, other.name, err)
					}
					if c.proxies == nil {
						c.proxies = map[[2]int]*netproxy.Proxy{}
					}
					c.proxies[[2]int{i, j}] = px
					target = px.Addr()
				}
				cfg.Routes = append(cfg.Routes, target)
			}
			if c.opts.ProxiedRoutes {
				// Port 1 refuses at once: a gossiped (implicit) route goes nowhere, only the
				// configured ones through the proxies exist.
				cfg.ClusterAdvertise = "127.0.0.1:1"
			}
		}
		if err := os.WriteFile(nd.conf, cfg.Render(), 0o600); err != nil {
			return err
		}
	}
	for _, nd := range c.nodes {
		if err := c.spawn(nd); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.StartTimeout)
	defer cancel()
	for _, nd := range c.nodes {
		if err := c.waitUp(ctx, nd); err != nil {
			return err
		}
	}
	return nil
}

// spawn starts a node's process (which must not be running).
func (c *Cluster) spawn(nd *node) error {
	lf, err := os.OpenFile(nd.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	fmt.Fprintf(lf, "=== natscluster: starting %s at %s\n", nd.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "nats-server", "-c", nd.conf)
	cmd.Stdout, cmd.Stderr = lf, lf
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s (%s nats-server -c %s): %w", nd.name, c.bin, nd.conf, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	nd.mu.Lock()
	nd.cmd, nd.done, nd.stopped = cmd, done, false
	nd.mu.Unlock()
	c.logf("natscluster: %s started (pid %d, client port %d)", nd.name, cmd.Process.Pid, nd.port)
	return nil
}

// waitUp waits until a node's monitoring endpoint says JetStream is enabled.
func (c *Cluster) waitUp(ctx context.Context, nd *node) error {
	nd.mu.Lock()
	done := nd.done
	nd.mu.Unlock()
	for {
		if st, _ := c.healthz(ctx, nd, true); st == 200 {
			return nil
		}
		select {
		case <-done:
			tail := c.LogTail(nd.idx, 8)
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("%s exited: %w:\n%s", nd.name, errPortInUse, tail)
			}
			return fmt.Errorf("%s exited while starting; its log (%s) ends:\n%s", nd.name, nd.log, tail)
		case <-ctx.Done():
			return fmt.Errorf("%s did not come up: %w; its log (%s) ends:\n%s", nd.name, ctx.Err(), nd.log, c.LogTail(nd.idx, 8))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// N returns the number of nodes.
func (c *Cluster) N() int { return len(c.nodes) }

// Name returns node i's server name.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index returns the index of the node with that server name, or -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// NodeURL returns node i's client URL.
func (c *Cluster) NodeURL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].port) }

// ClientURLs returns every node's client URL, comma-separated (what nats.Connect and
// 'pctl serve --nats' take).
func (c *Cluster) ClientURLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.NodeURL(i)
	}
	return strings.Join(urls, ",")
}

// MonitorURL returns node i's monitoring endpoint ("http://127.0.0.1:PORT").
func (c *Cluster) MonitorURL(i int) string {
	return fmt.Sprintf("http://127.0.0.1:%d", c.nodes[i].httpPort)
}

// Creds returns the NKey seed file of the user with full permissions.
func (c *Cluster) Creds() string { return c.creds }

// Dir returns the directory of the configuration files, data and logs.
func (c *Cluster) Dir() string { return c.dir }

// ConfigPath and LogPath return node i's configuration file and log.
func (c *Cluster) ConfigPath(i int) string { return c.nodes[i].conf }
func (c *Cluster) LogPath(i int) string    { return c.nodes[i].log }

// PID returns node i's process id, or 0 when it is not running.
func (c *Cluster) PID(i int) int {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.aliveLocked() {
		return 0
	}
	return nd.cmd.Process.Pid
}

// Running reports whether node i's process exists (it may be stopped by Stop).
func (c *Cluster) Running(i int) bool {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.aliveLocked()
}

// Stopped reports whether node i is paused by Stop.
func (c *Cluster) Stopped(i int) bool {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.aliveLocked() && nd.stopped
}

func (nd *node) aliveLocked() bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// Connect connects to the cluster (every node's URL) as the full-permission user. Extra options
// are applied after the harness's: reconnect forever, and ping every second so that a connection
// to a paused node (Stop) is given up within about 3 seconds instead of nats.go's 4 minutes.
func (c *Cluster) Connect(opts ...nats.Option) (*nats.Conn, error) {
	o, err := nats.NkeyOptionFromSeed(c.creds)
	if err != nil {
		return nil, err
	}
	all := append([]nats.Option{o, nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.PingInterval(time.Second), nats.MaxPingsOutstanding(2), nats.Name("natscluster")}, opts...)
	return nats.Connect(c.ClientURLs(), all...)
}

// Kill sends SIGKILL to node i and waits until its process is gone (a no-op on a node that is
// down).
func (c *Cluster) Kill(i int) error { return c.signalAndWait(i, syscall.SIGKILL, 0) }

// Shutdown stops node i cleanly (SIGTERM, as an operator's restart would), waiting up to 10s
// before it kills it.
func (c *Cluster) Shutdown(i int) error { return c.signalAndWait(i, syscall.SIGTERM, 10*time.Second) }

func (c *Cluster) signalAndWait(i int, sig syscall.Signal, grace time.Duration) error {
	nd := c.nodes[i]
	nd.mu.Lock()
	if !nd.aliveLocked() {
		nd.mu.Unlock()
		return nil
	}
	p, done, stopped := nd.cmd.Process, nd.done, nd.stopped
	nd.mu.Unlock()
	if stopped && sig != syscall.SIGKILL {
		_ = p.Signal(syscall.SIGCONT)
	}
	if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s %s: %w", sig, nd.name, err)
	}
	if grace > 0 {
		select {
		case <-done:
		case <-time.After(grace):
			c.logf("natscluster: %s did not stop within %v of %s; killing it", nd.name, grace, sig)
			_ = p.Signal(syscall.SIGKILL)
		}
	}
	<-done
	c.logf("natscluster: %s %s", nd.name, map[syscall.Signal]string{syscall.SIGKILL: "killed (SIGKILL)", syscall.SIGTERM: "shut down (SIGTERM)"}[sig])
	return nil
}

// Stop pauses node i with SIGSTOP: it holds its connections open and answers nothing, as a node
// in a long GC pause or a frozen VM does. Cont resumes it.
func (c *Cluster) Stop(i int) error { return c.pause(i, syscall.SIGSTOP, true) }

// Cont resumes node i after Stop (SIGCONT).
func (c *Cluster) Cont(i int) error { return c.pause(i, syscall.SIGCONT, false) }

func (c *Cluster) pause(i int, sig syscall.Signal, stopped bool) error {
	nd := c.nodes[i]
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if !nd.aliveLocked() {
		return fmt.Errorf("%s %s: the node is not running", sig, nd.name)
	}
	if err := nd.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s %s: %w", sig, nd.name, err)
	}
	nd.stopped = stopped
	waitStopped(nd.cmd.Process.Pid, stopped)
	c.logf("natscluster: %s %s", nd.name, map[bool]string{true: "paused (SIGSTOP)", false: "resumed (SIGCONT)"}[stopped])
	return nil
}

// Restart starts node i again with its configuration and data (killing it first if it runs), and
// waits until it is up with JetStream enabled. It does not wait for the node to catch up: use
// WaitHealthy for that.
func (c *Cluster) Restart(i int) error {
	if err := c.Kill(i); err != nil {
		return err
	}
	nd := c.nodes[i]
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.StartTimeout)
	defer cancel()
	// The ports are fixed (the other nodes' routes name them): if one is briefly taken (a
	// connection in TIME_WAIT does not block a listener; another process might), try again.
	for {
		if err := c.spawn(nd); err != nil {
			return err
		}
		err := c.waitUp(ctx, nd)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Close stops every node (SIGKILL: a test's cluster has nothing to flush) and, for a cluster
// made by New without Options.Dir, removes its directory. It is idempotent.
func (c *Cluster) Close() {
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	c.connMu.Lock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
	c.connMu.Unlock()
	c.killAll()
	c.cleanupDir()
}

func (c *Cluster) killAll() {
	for i := range c.nodes {
		_ = c.Kill(i)
	}
	for _, px := range c.proxies {
		px.Close()
	}
}

func (c *Cluster) cleanupDir() {
	if c.rmDir {
		_ = os.RemoveAll(c.dir)
	}
}

// LogTail returns the last n lines of node i's log.
func (c *Cluster) LogTail(i, n int) string {
	b, err := os.ReadFile(c.nodes[i].log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct free ports on 127.0.0.1 (held open together, so distinct).
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NewUser creates an NKey user, writes its seed to path (mode 0600) and returns its public key
// (for Options.Users) and the path (for a client's credentials).
func NewUser(path string) (pub, seedFile string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", err
	}
	seed, _ := kp.Seed()
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return "", "", err
	}
	pub, _ = kp.PublicKey()
	return pub, path, nil
}

func writeUser(path string) (string, error) {
	_, p, err := NewUser(path)
	return p, err
}

func publicKey(seedFile string) (string, error) {
	b, err := os.ReadFile(seedFile)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return "", fmt.Errorf("%s: %w", seedFile, err)
	}
	return kp.PublicKey()
}

// Bin returns the pctl binary the nodes run (for starting brokers from the same build).
func (c *Cluster) Bin() string { return c.bin }
