package broker

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"pctl.dev/pctl/internal/logging"

	"pctl.dev/pctl/internal/testhook"
)

// Config configures a Broker. The zero value runs an embedded server on 127.0.0.1:4222 with its
// data in the per-user data directory.
type Config struct {
	// DataDir holds JetStream's files and the role credentials. Default: $XDG_DATA_HOME/pctl,
	// or ~/.local/share/pctl.
	DataDir string
	// Listen is the embedded server's client address. Default "127.0.0.1:4222"; port 0 picks a
	// free port (see Broker.ClientURL).
	Listen string
	// NATSURL, if set, uses an existing NATS server or cluster (with JetStream) instead of
	// embedding one; Creds then names the NKey seed file the broker connects with (it needs full
	// permissions). Role credentials are the operator's business in that mode.
	NATSURL string
	Creds   string
	// MaxPayload is the embedded server's largest message. Default 16 MiB, so that a plugin
	// (at most 8 MiB) travels in one message.
	MaxPayload int32
	// MaxRecordBytes is the largest record (key + value + headers) a partition stream accepts.
	// Default 1 MiB.
	MaxRecordBytes int32
	// Replicas is the default number of replicas of a new topic's partition streams (a topic
	// created with its own replicas keeps them), and the replicas of pctl's buckets (descriptors,
	// plugins, group state). Default 1; the embedded server runs alone, so only 1 there; 3 on a
	// cluster of three or more JetStream servers.
	Replicas int
	// SyncInterval is how often the embedded server fsyncs JetStream's files. Zero, the default,
	// means before acknowledging any write (nats-server's "sync_interval: always"): an
	// acknowledged record survives an OS crash or a power failure. A positive duration (nats-
	// server's own default is 2 minutes) is faster, but an OS crash or power failure can lose up
	// to that much acknowledged data (RATIONALE.md, "Why fsync before acknowledging?"). With
	// NATSURL the servers' own configuration decides.
	SyncInterval time.Duration
	// ConformanceKeys is the number of random keys the upload check runs. Default 20000.
	ConformanceKeys int
	// Logger receives the broker's structured log lines (log/slog): one line per admin action
	// and per epoch-change step, warnings for failed and retried steps; the embedded NATS
	// server logs through it too (component=nats). Default: Logf's lines, else discard.
	Logger *slog.Logger
	// Logf receives the broker's log lines as text. Default: the lines go to Logger.
	Logf func(format string, args ...any)
	// Hooks observe the broker's work (hooks.go): values implementing any of the broker's Hook*
	// interfaces, or the client package's for the produce service's producers. Metrics come out
	// through them (internal/metrics). Default: none.
	Hooks []any
	// ProduceTimeout bounds one publish of the produce service. Default 10s.
	ProduceTimeout time.Duration
	// RetryInterval is how often the broker looks for unfinished work (a topic being created or
	// deleted, an epoch change, pending ancestry) that made no progress for two intervals, and
	// retries it with a backoff of up to 30s. Default 2s.
	RetryInterval time.Duration
	// NativeBuiltins lets the produce service partition with a built-in's Go implementation for
	// an epoch whose module is exactly that built-in's and has no config (partitioner.NativeFor;
	// they agree bit for bit, spec/builtins.md), as client.Options.NativeBuiltins does for a Go
	// client; any other module, including an upload claiming compatibility, runs as WebAssembly.
	// Default false: every record is placed by the module.
	NativeBuiltins bool
	// Testing holds hooks for this module's own tests (internal/testhook: the epoch change's
	// step and per-partition hooks); nil everywhere else.
	Testing *testhook.Broker
	// StreamOpsInFlight is how many partition streams a step over a topic's partitions (creating
	// a topic, an epoch change's create and fence, a reconfiguration) works on at once: stream
	// creates and updates are JetStream API requests answered one by one, so a change of
	// thousands of partitions keeps this many in flight. Default 64.
	StreamOpsInFlight int

	natsLogs bool // set by withDefaults: route the embedded server's log to Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		d, err := DefaultDataDir()
		if err != nil {
			return c, err
		}
		c.DataDir = d
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:4222"
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = 16 << 20
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = 1 << 20
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.StreamOpsInFlight <= 0 {
		c.StreamOpsInFlight = 64
	}
	if c.ConformanceKeys == 0 {
		c.ConformanceKeys = 20000
	}
	// The embedded server logs only to a Logger given as such: a test's Logf (t.Logf) must not
	// get server lines after the test ends.
	c.natsLogs = c.Logger != nil
	if c.Logger == nil {
		if c.Logf != nil {
			c.Logger = logging.Logf(c.Logf)
		} else {
			c.Logger = logging.Discard()
		}
	}
	if c.Logf == nil {
		l := c.Logger
		c.Logf = func(format string, args ...any) { l.Info(fmt.Sprintf(format, args...)) }
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = 2 * time.Second
	}
	if c.ProduceTimeout == 0 {
		c.ProduceTimeout = 10 * time.Second
	}
	if c.NATSURL == "" && c.Replicas > 1 {
		return c, fmt.Errorf("broker: --replicas %d needs a JetStream cluster; the embedded server runs alone (use 'pctl serve --nats URL' with a cluster)", c.Replicas)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return c, fmt.Errorf("broker: --replicas %d: JetStream keeps 1 to 5 replicas", c.Replicas)
	}
	if c.SyncInterval < 0 {
		return c, fmt.Errorf("broker: --sync-interval %v is negative; give 0 (fsync before every acknowledgement) or a duration such as 2m", c.SyncInterval)
	}
	if c.NATSURL != "" && c.Creds == "" {
		return c, fmt.Errorf("broker: --nats %s needs --creds: the broker's own NKey seed file (full permissions)", c.NATSURL)
	}
	return c, nil
}

// DefaultDataDir returns the per-user data directory.
func DefaultDataDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "pctl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("broker: no data directory: %w; give --data DIR", err)
	}
	return filepath.Join(home, ".local", "share", "pctl"), nil
}

func splitListen(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, fmt.Errorf("broker: --listen %q: %v; give HOST:PORT, e.g. 127.0.0.1:4222", s, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("broker: --listen %q: port must be 0 to 65535", s)
	}
	if p == 0 {
		p = -1 // nats-server: random port
	}
	return host, p, nil
}
