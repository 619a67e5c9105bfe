package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/dirlock"
	"pctl.dev/pctl/internal/logging"
	"pctl.dev/pctl/internal/metrics"
	"pctl.dev/pctl/internal/statuspage"
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
   "nats": "nats://a:4222,nats://b:4222", "creds": "/etc/pctl/broker.nk",
   "http": "127.0.0.1:8080", "log_format": "json", "log_level": "info", "metrics_partitions": false}

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

Native built-ins: --native-builtins makes the produce service place a thin client's records with a
built-in's Go implementation when the epoch's module is exactly that built-in's (by digest) and has
no config, as the Go client's NativeBuiltins option does: the same partitions (spec/builtins.md),
without the WebAssembly call. Off by default; any other module always runs as WebAssembly.

Several brokers: any number of 'pctl serve --nats URL' processes may run against one cluster, each
with its own --data. Requests go to any of them; an epoch change, creation or deletion left
unfinished by one (it died, or a node was down) is finished by any other, or by itself, within a
few --retry-interval periods (default 2s).

Operations: --http ADDR serves a live status page at http://ADDR/ (topics, their epochs and
ancestry graph, an epoch change step by step, consumer groups with members, lag and gate waits,
plugins with their conformance reports; it updates itself during a change), Prometheus metrics at
/metrics (--metrics-partitions adds per-partition series), /healthz (the process runs and is
connected to NATS), /readyz (JetStream and the buckets answer, unfinished work resumed) and the
embedded NATS server's monitoring at /nats/varz, /nats/jsz, /nats/connz. It listens before the
broker starts, so health checks answer while it waits for a cluster. Port 0 picks a free port
(the "http listening" log line names it).

Logs: one structured line per event on standard error (log/slog): --log-format text (default) or
json, --log-level debug, info (default), warn or error. Every admin action (topic create, delete,
repartition; plugin upload with its conformance verdict, delete) and every epoch-change step is
one line; failed, stuck and retried steps are warnings; long lists are summarised. The embedded
NATS server logs through the same logger (component=nats).

One broker per data directory: a second 'pctl serve' on the same --data fails at once, naming the
process that holds it (pid, command, start time; the lock is <data>/LOCK, released by the kernel
when its holder exits, however it exits).

Examples:
  pctl serve
  pctl serve --http 127.0.0.1:8080 --log-format json
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
	// Operations (the --http, --log-format, --log-level and --metrics-partitions flags).
	HTTP              string `json:"http"`
	LogFormat         string `json:"log_format"`
	LogLevel          string `json:"log_level"`
	MetricsPartitions bool   `json:"metrics_partitions"`
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
			return sc, fmt.Errorf("--config %s: unknown field %s; the fields are data, listen, nats, creds, max_record_bytes, max_payload, replicas, conformance_keys, produce_timeout, sync_interval, retry_interval, http, log_format, log_level, metrics_partitions", path, f)
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
	httpAddr := fs.String("http", "", "serve the status page, /metrics, /healthz and /readyz on `HOST:PORT` (port 0 picks one)")
	logFormat := fs.String("log-format", "text", "log line `FORMAT` on standard error: text or json")
	logLevel := fs.String("log-level", "info", "least important log lines shown: debug, info, warn or `error`")
	native := fs.Bool("native-builtins", false, "the produce service partitions with a built-in's Go implementation when an epoch's module is exactly that built-in's without config (the same placement, faster; other modules run as WebAssembly)")
	perPartition := fs.Bool("metrics-partitions", false, "with --http: also export per-partition metrics (a series per partition and group: mind large topics)")
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
		if !set["http"] && fc.HTTP != "" {
			*httpAddr = fc.HTTP
		}
		if !set["log-format"] && fc.LogFormat != "" {
			*logFormat = fc.LogFormat
		}
		if !set["log-level"] && fc.LogLevel != "" {
			*logLevel = fc.LogLevel
		}
		if !set["metrics-partitions"] && fc.MetricsPartitions {
			*perPartition = true
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
	cfg.NativeBuiltins = *native
	if cfg.NATSURL == "" {
		// nats-server reports a port in use only by not becoming ready (30s): find out first.
		if err := checkListen(cfg.Listen); err != nil {
			return failErr(e, "serve", err)
		}
	}
	level, err := logging.ParseLevel(*logLevel)
	if err != nil {
		return usageErr(e, "serve", "--log-level: %v", err)
	}
	logger, err := logging.New(e.stderr, *logFormat, level)
	if err != nil {
		return usageErr(e, "serve", "--log-format: %v", err)
	}
	cfg.Logger = logger
	cfg.Logf = func(format string, args ...any) { logger.Info(oneLine(fmt.Sprintf(format, args...))) }
	var ops *statuspage.Server
	if *httpAddr != "" {
		// Listen first: a port in use fails at once, and health checks answer while the broker
		// starts (it may wait for a cluster).
		m := metrics.New(metrics.Options{PerPartition: *perPartition})
		cfg.Hooks = append(cfg.Hooks, m)
		ops = statuspage.New(statuspage.Options{Metrics: m, Logger: logger})
		stopHTTP, addr, err := serveHTTP(*httpAddr, ops.Handler(), logger)
		if err != nil {
			return failErr(e, "serve", err)
		}
		defer stopHTTP()
		logger.Info("http listening", "addr", addr, "status", "http://"+addr+"/", "metrics", "http://"+addr+"/metrics")
	}
	b, err := broker.Start(e.ctx, cfg)
	if err != nil {
		if e.ctx.Err() != nil {
			return usageFail(e, "serve", "interrupted while starting")
		}
		if errors.Is(err, dirlock.ErrHeld) {
			return usageErr(e, "serve", "%v", err)
		}
		return failErr(e, "serve", err)
	}
	if ops != nil {
		ops.SetBroker(e.ctx, b)
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

// serveHTTP listens on addr and serves h until the returned stop function is called.
func serveHTTP(addr string, h http.Handler, logger *slog.Logger) (stop func(), bound string, err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--http %s: %v; is another 'pctl serve' running there? (--http HOST:0 picks a free port)", addr, unwrapOpErr(err))
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server stopped", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx) // event streams never end by themselves: close them after 2s
		_ = srv.Close()
		<-done
	}, l.Addr().String(), nil
}
