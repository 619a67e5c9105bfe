package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

func init() {
	register(command{name: "serve", summary: "run the broker (embedded NATS JetStream, or connected to a NATS cluster)", run: cmdServe})
}

const serveHelp = `
Runs the broker: an embedded NATS server with JetStream (or, with --nats, a connection to an
existing NATS server or cluster with JetStream), plus pctl's services: the plugin registry, topics,
the broker-side produce service and epoch changes.

When it is ready it prints exactly one line on standard output:

  pctl: broker ready at nats://127.0.0.1:4222 (data DIR; admin credentials DIR/admin.nk)

then logs on standard error until SIGINT or SIGTERM, when it stops cleanly: requests in progress
are answered and every acknowledged record is on disk. Restarting on the same --data keeps the
topics, plugins, records and consumer-group positions.

The first start creates the role credentials in the data directory: admin.nk (everything),
producer.nk (produce, read topics and plugins) and consumer.nk (consume). Give them to clients
with --creds or PCTL_CREDS.

--config FILE is a JSON object with the same settings; flags given on the command line win:

  {"data": "/var/lib/pctl", "listen": "0.0.0.0:4222", "max_record_bytes": 1048576,
   "max_payload": 16777216, "replicas": 1, "conformance_keys": 20000, "produce_timeout": "10s",
   "sync_interval": "always", "retry_interval": "2s",
   "nats": "nats://a:4222,nats://b:4222", "creds": "/etc/pctl/broker.nk"}

An unknown field is an error. --listen with port 0 picks a free port (the ready line names it).

Replication: --replicas N is the default number of replicas of a new topic's partition streams
('pctl topic create --replicas' overrides it per topic, 'pctl topic set --replicas' changes a live
topic) and the replicas of pctl's own buckets (descriptors, plugins, group state). The embedded
server runs alone, so N is 1 there; on a cluster of three or more JetStream servers use 3.

Durability: the embedded server fsyncs before it acknowledges a write (--sync-interval always, the
default), so an acknowledged record survives an OS crash or a power failure, not only a crash of
the process. --sync-interval DURATION (nats-server's default is 2m) fsyncs in the background
instead: produce throughput is higher (RATIONALE.md has the numbers measured on this machine), but
an OS crash or power failure can lose up to DURATION of acknowledged records. With --nats the NATS
servers' own sync_interval decides (the server configuration pctl writes for a cluster
says "always").

Several brokers: any number of 'pctl serve --nats URL' processes may run against one cluster, each
with its own --data. Requests go to any of them; an epoch change, creation or deletion left
unfinished by one (it died, or a node was down) is finished by any other, or by itself, within a
few --retry-interval periods (default 2s).

Examples:
  pctl serve
  pctl serve --data ./pctl-data --listen 127.0.0.1:0
  pctl serve --nats nats://nats-1:4222 --creds broker.nk
  pctl serve --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds broker.nk --replicas 3
`

// serveConfig is the --config file: broker.Config's settings, in JSON.
type serveConfig struct {
	Data            string `json:"data"`
	Listen          string `json:"listen"`
	NATS            string `json:"nats"`
	Creds           string `json:"creds"`
	MaxRecordBytes  int32  `json:"max_record_bytes"`
	MaxPayload      int32  `json:"max_payload"`
	Replicas        int    `json:"replicas"`
	ConformanceKeys int    `json:"conformance_keys"`
	ProduceTimeout  string `json:"produce_timeout"`
	SyncInterval    string `json:"sync_interval"`
	RetryInterval   string `json:"retry_interval"`
}

func readServeConfig(path string) (serveConfig, error) {
	var sc serveConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return sc, fmt.Errorf("--config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sc); err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			return sc, fmt.Errorf("--config %s: unknown field %s; the fields are data, listen, nats, creds, max_record_bytes, max_payload, replicas, conformance_keys, produce_timeout, sync_interval, retry_interval", path, f)
		}
		return sc, fmt.Errorf("--config %s: not a valid JSON settings object: %s", path, strings.TrimPrefix(msg, "json: "))
	}
	if dec.More() {
		return sc, fmt.Errorf("--config %s: more than one JSON value; the file holds one object", path)
	}
	return sc, nil
}

func cmdServe(e *env, args []string) int {
	fs := newFlags(e, "serve", "serve [--data DIR] [--listen HOST:PORT] [--config FILE] [--nats URL --creds FILE] [--replicas N] [--sync-interval always|DURATION]", serveHelp)
	var sc serveConfig
	fs.StringVar(&sc.Data, "data", "", "data `DIR`: JetStream files and role credentials (default $XDG_DATA_HOME/pctl or ~/.local/share/pctl)")
	fs.StringVar(&sc.Listen, "listen", "", "client address `HOST:PORT` of the embedded server; port 0 picks one (default 127.0.0.1:4222)")
	configFile := fs.String("config", "", "JSON settings `FILE` (flags override it)")
	fs.StringVar(&sc.NATS, "nats", "", "use this NATS server or cluster `URL` (with JetStream) instead of an embedded one")
	fs.StringVar(&sc.Creds, "creds", "", "with --nats: the broker's NKey seed `FILE` (full permissions)")
	maxRecord := fs.Int("max-record-bytes", 0, "largest record, key + value + headers, in `BYTES` (default 1048576)")
	replicas := fs.Int("replicas", 0, "default replicas of new topics' partition streams, and of pctl's buckets: `N` (default 1; 3 on a cluster)")
	syncInterval := fs.String("sync-interval", "", "embedded server: fsync before acknowledging (always, the default) or every `DURATION` (faster; an OS crash can lose up to DURATION of acknowledged records)")
	retryInterval := fs.String("retry-interval", "", "how often to look for unfinished epoch changes, creations and deletions to retry: `DURATION` (default 2s)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, "serve", "takes no arguments (got %q)", pos[0])
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *configFile != "" {
		fc, err := readServeConfig(*configFile)
		if err != nil {
			return usageErr(e, "serve", "%v", err)
		}
		if !set["data"] {
			sc.Data = fc.Data
		}
		if !set["listen"] {
			sc.Listen = fc.Listen
		}
		if !set["nats"] {
			sc.NATS = fc.NATS
		}
		if !set["creds"] {
			sc.Creds = fc.Creds
		}
		sc.MaxPayload, sc.ConformanceKeys, sc.ProduceTimeout = fc.MaxPayload, fc.ConformanceKeys, fc.ProduceTimeout
		if !set["max-record-bytes"] {
			sc.MaxRecordBytes = fc.MaxRecordBytes
		}
		if !set["replicas"] {
			sc.Replicas = fc.Replicas
		}
		if !set["sync-interval"] {
			sc.SyncInterval = fc.SyncInterval
		}
		if !set["retry-interval"] {
			sc.RetryInterval = fc.RetryInterval
		}
	}
	if set["replicas"] {
		sc.Replicas = *replicas
	}
	if set["sync-interval"] {
		sc.SyncInterval = *syncInterval
	}
	if set["retry-interval"] {
		sc.RetryInterval = *retryInterval
	}
	if set["max-record-bytes"] {
		if *maxRecord < 0 || *maxRecord > 1<<31-1 {
			return usageErr(e, "serve", "--max-record-bytes %d is out of range", *maxRecord)
		}
		sc.MaxRecordBytes = int32(*maxRecord)
	}
	if sc.NATS != "" {
		if err := client.CheckServerURL(sc.NATS); err != nil {
			return usageErr(e, "serve", "--nats: %s", trimSentinel(err))
		}
	}
	cfg, err := sc.brokerConfig()
	if err != nil {
		return usageErr(e, "serve", "%v", err)
	}
	if cfg.NATSURL == "" {
		// nats-server reports a port in use only by not becoming ready (30s): find out first.
		if err := checkListen(cfg.Listen); err != nil {
			return failErr(e, "serve", err)
		}
	}
	logw := &lockedWriter{w: e.stderr}
	cfg.Logf = func(format string, args ...any) {
		fmt.Fprintf(logw, "%s pctl serve: %s\n", time.Now().Format("2006-01-02T15:04:05.000Z07:00"), oneLine(fmt.Sprintf(format, args...)))
	}
	b, err := broker.Start(e.ctx, cfg)
	if err != nil {
		if e.ctx.Err() != nil {
			return usageFail(e, "serve", "interrupted while starting")
		}
		return failErr(e, "serve", err)
	}
	if cfg.NATSURL == "" {
		fmt.Fprintf(e.stdout, "pctl: broker ready at %s (data %s; admin credentials %s)\n", b.ClientURL(), cfg.DataDir, b.CredsPath(broker.RoleAdmin))
	} else {
		fmt.Fprintf(e.stdout, "pctl: broker ready at %s (data %s; connected with %s; role credentials are the NATS operator's)\n", b.ClientURL(), cfg.DataDir, cfg.Creds)
	}
	<-e.ctx.Done()
	cfg.Logf("shutting down: answering requests in progress, flushing")
	start := time.Now()
	if err := b.Close(); err != nil {
		return failErr(e, "serve", fmt.Errorf("shutdown: %w", err))
	}
	cfg.Logf("stopped cleanly in %v", time.Since(start).Round(time.Millisecond))
	return exitOK
}

// brokerConfig validates the settings and turns them into a broker.Config.
func (sc serveConfig) brokerConfig() (broker.Config, error) {
	cfg := broker.Config{Listen: sc.Listen, NATSURL: sc.NATS, Creds: sc.Creds,
		MaxRecordBytes: sc.MaxRecordBytes, MaxPayload: sc.MaxPayload, Replicas: sc.Replicas, ConformanceKeys: sc.ConformanceKeys}
	dir := sc.Data
	if dir == "" {
		d, err := broker.DefaultDataDir()
		if err != nil {
			return cfg, err
		}
		dir = d
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return cfg, fmt.Errorf("--data %s: %w", dir, err)
	}
	cfg.DataDir = abs
	switch {
	case sc.NATS != "" && sc.Creds == "":
		return cfg, errors.New("--nats needs --creds: the NKey seed file the broker connects with (full permissions)")
	case sc.NATS == "" && sc.Creds != "":
		return cfg, errors.New("--creds is the broker's own credentials with --nats; the embedded server creates its role credentials in --data")
	case sc.NATS != "" && sc.Listen != "":
		return cfg, errors.New("--listen is the embedded server's address; with --nats clients connect to the NATS cluster")
	case sc.MaxRecordBytes < 0, sc.MaxPayload < 0, sc.Replicas < 0, sc.ConformanceKeys < 0:
		return cfg, errors.New("max_record_bytes, max_payload, replicas and conformance_keys must not be negative")
	case sc.Replicas > 5:
		return cfg, fmt.Errorf("--replicas %d: JetStream keeps 1 to 5 replicas", sc.Replicas)
	case sc.NATS == "" && sc.Replicas > 1:
		return cfg, fmt.Errorf("--replicas %d needs a JetStream cluster (--nats URL); the embedded server runs alone", sc.Replicas)
	}
	switch sc.SyncInterval {
	case "", "always":
	default:
		d, err := time.ParseDuration(sc.SyncInterval)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("--sync-interval %q: give always (fsync before every acknowledgement, the default) or a positive duration such as 2m", sc.SyncInterval)
		}
		if sc.NATS != "" {
			return cfg, errors.New("--sync-interval sets the embedded server's fsync; with --nats the NATS servers' own sync_interval decides")
		}
		cfg.SyncInterval = d
	}
	if sc.RetryInterval != "" {
		d, err := time.ParseDuration(sc.RetryInterval)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("--retry-interval %q is not a positive duration such as \"2s\"", sc.RetryInterval)
		}
		cfg.RetryInterval = d
	}
	if sc.Creds != "" {
		if _, err := os.Stat(sc.Creds); err != nil {
			return cfg, fmt.Errorf("--creds %s: %v", sc.Creds, unwrapPath(err))
		}
	}
	payload := sc.MaxPayload
	if payload == 0 {
		payload = 16 << 20
	}
	if sc.MaxRecordBytes > payload {
		return cfg, fmt.Errorf("max_record_bytes %d is more than max_payload %d: a record must fit in one NATS message", sc.MaxRecordBytes, payload)
	}
	if sc.ProduceTimeout != "" {
		d, err := time.ParseDuration(sc.ProduceTimeout)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("produce_timeout %q is not a positive duration such as \"10s\"", sc.ProduceTimeout)
		}
		cfg.ProduceTimeout = d
	}
	return cfg, nil
}

// checkListen fails at once when the embedded server's address cannot be listened on (a port in
// use, an address not on this machine); port 0 and an empty address pass.
func checkListen(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:4222"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "0" {
		return nil // the broker words a malformed address
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen %s: %v; is another 'pctl serve' or NATS server running? (--listen HOST:0 picks a free port)", addr, unwrapOpErr(err))
	}
	return l.Close()
}

func unwrapOpErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err
		}
		return oe.Err
	}
	return err
}

// lockedWriter serialises writes: the broker logs from many goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
