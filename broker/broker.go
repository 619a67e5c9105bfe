package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/dirlock"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

// Broker is a running broker. Start it with Start; stop it with Close.
type Broker struct {
	id    string // random, new at every start: names this broker to thin clients (§5.2)
	cfg   Config
	srv   *server.Server // nil with Config.NATSURL
	nc    *nats.Conn
	js    jetstream.JetStream
	topic jetstream.KeyValue
	group jetstream.KeyValue
	objs  jetstream.ObjectStore
	rt    *runtime.Runtime
	lib   *partitioner.Library

	mu    sync.Mutex
	parts map[string]*partitioner.WASM // digest+config -> partitioner (produce service, ancestry)
	subs  []*nats.Subscription
	wg    sync.WaitGroup // goroutines started by spawn
	ctx   context.Context

	spawnMu      sync.Mutex
	spawnStopped bool // Close or Abort waits on wg: spawn starts nothing more
	stop         context.CancelFunc

	users *userRegistry // scoped credentials of the embedded server (creds.go); nil with NATSURL

	// streamAdds keeps stream creation and configuration reloads apart: nats-server reads its
	// options without their lock when it adds a stream (Account.addStream reads s.opts for the
	// ingest limits) while a reload replaces them, a data race -race reported in
	// TestScopedProducerFollowsTopicGrowth (an epoch change's create step beside the reload that
	// follows the topic's growth). The broker creates every pctl stream and bucket, holding the
	// read lock across that one request to its own server; a reload (userRegistry.update) holds
	// the write lock, so only reloads ever wait, and only for a stream creation.
	streamAdds sync.RWMutex
	floors     descriptorFloors // descriptor revisions this broker wrote or read (descriptors.go)
	locks      topicLocks       // one epoch change, creation or deletion at a time per topic, in this process

	// The background retry loop (reconcile.go) and the observed-ancestry scans: stopped first by
	// Close and Abort.
	loopCtx   context.Context
	loopStop  context.CancelFunc
	loopWG    sync.WaitGroup
	observing sync.Map // "topic/epoch" -> true while this process scans for observed ancestry
	// backfilling: "topic/epoch" -> true while this process runs that backfill (backfill.go)
	backfilling sync.Map
	// stepsSeen: topic -> stepSeen, the last progress of an epoch change step another broker
	// published (wire.ChangeEvent): its retry loop leaves a step that moves alone (reconcile.go).
	stepsSeen sync.Map
	ps        produceService

	dirLock *dirlock.Lock // one broker per data directory (internal/dirlock)
	started time.Time
}

// Start starts a broker: the embedded server (unless Config.NATSURL), the buckets, the services,
// and the resumption of any epoch change a previous run left unfinished.
func Start(ctx context.Context, cfg Config) (*Broker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Broker{cfg: cfg, parts: make(map[string]*partitioner.WASM), id: nuid.Next(), started: time.Now().UTC()}
	b.ctx, b.stop = context.WithCancel(context.Background())
	b.loopCtx, b.loopStop = context.WithCancel(b.ctx)
	ok := false
	defer func() {
		if !ok {
			b.Close()
		}
	}()
	// One broker per data directory: a second one on the same files would answer differently.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("broker: data directory: %w", err)
	}
	if b.dirLock, err = dirlock.Acquire(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if cfg.NATSURL == "" {
		if err := b.startEmbedded(); err != nil {
			return nil, err
		}
	} else {
		opt, err := nats.NkeyOptionFromSeed(cfg.Creds)
		if err != nil {
			return nil, fmt.Errorf("broker: credentials %s: %w", cfg.Creds, err)
		}
		b.nc, err = nats.Connect(cfg.NATSURL, opt, nats.Name("pctl-broker"), nats.MaxReconnects(-1))
		if err != nil {
			return nil, fmt.Errorf("broker: connect to %s: %w", cfg.NATSURL, err)
		}
	}
	// An asynchronous publish (the backfill's copies) whose answer never comes (the stream's
	// leader stepped down with it in flight, or a node froze) fails after ProduceTimeout and is
	// published again; without the bound its wait was forever, and the backfill with it (CI,
	// 2026-12-01: a backfill resumed after a broker's death stayed at Done [142 179 0]).
	b.js, err = jetstream.New(b.nc, jetstream.WithPublishAsyncTimeout(cfg.ProduceTimeout))
	if err != nil {
		return nil, err
	}
	if err := b.ensureBucketsWaiting(ctx); err != nil {
		return nil, err
	}
	b.rt, err = runtime.New(ctx, runtime.Config{CacheDir: filepath.Join(cfg.DataDir, "wazero-cache")})
	if err != nil {
		return nil, err
	}
	b.lib = partitioner.NewLibrary(b.rt)
	if err := b.subscribe(); err != nil {
		return nil, err
	}
	if err := b.resume(ctx); err != nil {
		return nil, err
	}
	b.loopWG.Add(1)
	go b.retryLoop()
	ok = true
	return b, nil
}

func (b *Broker) startEmbedded() error {
	if err := os.MkdirAll(b.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("broker: data directory: %w", err)
	}
	users, err := ensureCredentials(b.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("broker: credentials: %w", err)
	}
	host, port, err := splitListen(b.cfg.Listen)
	if err != nil {
		return err
	}
	opts := &server.Options{
		ServerName: "pctl",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   filepath.Join(b.cfg.DataDir, "jetstream"),
		MaxPayload: b.cfg.MaxPayload,
		NoSigs:     true,
		NoLog:      true,
	}
	if b.cfg.SyncInterval == 0 {
		// fsync before acknowledging (sync_interval: always); see Config.SyncInterval.
		opts.SyncAlways = true
		opts.SyncInterval = 2 * time.Minute
	} else {
		opts.SyncInterval = b.cfg.SyncInterval
	}
	for role, pub := range users {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub, Permissions: UserPermissions(role, pub)})
	}
	if b.users, err = newUserRegistry(b.cfg.DataDir, opts); err != nil { // creds.go
		return fmt.Errorf("broker: %w", err)
	}
	b.users.adds = &b.streamAdds
	b.srv, err = server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	b.users.srv = b.srv
	b.setNATSLogger() // logging.go
	go b.srv.Start()
	if !b.srv.ReadyForConnections(30 * time.Second) {
		return fmt.Errorf("broker: the NATS server did not start listening on %s within 30s (port in use? try --listen 127.0.0.1:0)", b.cfg.Listen)
	}
	opt, err := nats.NkeyOptionFromSeed(CredsPath(b.cfg.DataDir, roleBroker))
	if err != nil {
		return err
	}
	b.nc, err = nats.Connect(b.srv.ClientURL(), opt, nats.InProcessServer(b.srv), nats.Name("pctl-broker"))
	if err != nil {
		return fmt.Errorf("broker: internal connection: %w", err)
	}
	return nil
}

// bucketWait bounds how long Start waits for a JetStream cluster that cannot hold the buckets yet
// (nodes still starting, no meta leader elected, fewer servers up than --replicas).
const bucketWait = 2 * time.Minute

// ensureBucketsWaiting creates or updates the buckets, retrying while the cluster is not ready:
// brokers and NATS nodes are often started together.
func (b *Broker) ensureBucketsWaiting(ctx context.Context) error {
	deadline := time.Now().Add(bucketWait)
	pause := 100 * time.Millisecond
	logged := false
	for {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := b.ensureBuckets(octx)
		cancel()
		if err == nil || b.cfg.NATSURL == "" || ctx.Err() != nil || !clusterNotReady(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (waited %v for the JetStream cluster; are enough of its servers up for --replicas %d?)", err, bucketWait, b.cfg.Replicas)
		}
		if !logged {
			b.cfg.Logf("waiting for the JetStream cluster at %s: %v", b.cfg.NATSURL, err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		if pause < 2*time.Second {
			pause *= 2
		}
	}
}

// clusterNotReady reports whether a bucket creation failed because the cluster is not ready yet.
func clusterNotReady(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10005, 10023, 10008: // no suitable peers; insufficient resources; JetStream not ready (cluster)
			return true
		}
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

func (b *Broker) ensureBuckets(ctx context.Context) error {
	b.streamAdds.RLock() // the buckets are streams: see streamAdds
	defer b.streamAdds.RUnlock()
	var err error
	b.topic, err = b.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: wire.TopicsBucket, Description: "pctl topic descriptors", History: 10,
		Storage: jetstream.FileStorage, Replicas: b.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("broker: topics bucket: %w", err)
	}
	b.group, err = b.ensureGroupBucket(ctx) // groups.go: no rollups, no purges
	if err != nil {
		return fmt.Errorf("broker: groups bucket: %w", err)
	}
	b.objs, err = b.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: wire.PluginsBucket, Description: "pctl plugins, named by SHA-256 digest",
		Storage: jetstream.FileStorage, Replicas: b.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("broker: plugins bucket: %w", err)
	}
	return nil
}

// ClientURL is the URL clients connect to.
func (b *Broker) ClientURL() string {
	if b.srv != nil {
		return b.srv.ClientURL()
	}
	return b.cfg.NATSURL
}

// SyncInterval reports the embedded server's JetStream fsync policy as it runs: 0 when it fsyncs
// before acknowledging every write (sync_interval: always), else its background interval; ok is
// false without an embedded server (Config.NATSURL: the servers' own configuration decides).
func (b *Broker) SyncInterval() (d time.Duration, ok bool) {
	if b.srv == nil {
		return 0, false
	}
	jsc := b.srv.JetStreamConfig()
	if jsc == nil {
		return 0, false
	}
	if jsc.SyncAlways {
		return 0, true
	}
	return jsc.SyncInterval, true
}

// CredsPath returns the credentials file of a role (embedded mode).
func (b *Broker) CredsPath(role string) string { return CredsPath(b.cfg.DataDir, role) }

// ID returns the broker's id: random, new at every start (spec/protocol.md §5.2).
func (b *Broker) ID() string { return b.id }

// Conn returns the broker's own NATS connection (full permissions), for tests and tools.
func (b *Broker) Conn() *nats.Conn { return b.nc }

// Close stops the services, waits for requests in progress, flushes and shuts the server down.
// JetStream has persisted every acknowledged record before acknowledging it, so nothing
// acknowledged is lost.
func (b *Broker) Close() error {
	if b.loopStop != nil {
		b.loopStop()
	}
	b.loopWG.Wait()
	for _, s := range b.subs {
		_ = s.Drain()
	}
	// Drain delivers what the subscriptions already received: wait for that (bounded), so those
	// requests are served, then let no handler start another goroutine.
	for deadline, i := time.Now().Add(5*time.Second), 0; i < len(b.subs) && time.Now().Before(deadline); {
		if b.subs[i].IsValid() {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		i++
	}
	b.stopSpawning()
	b.wg.Wait()
	// Flush the produce service: every accepted record gets its answer. Records that cannot be
	// stored before the grace period ends (an epoch change stopped half way by this shutdown) get
	// none: their senders were never told they are stored, and retry.
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	b.ps.close(closeCtx)
	cancel()
	if b.stop != nil {
		b.stop()
	}
	if b.nc != nil {
		_ = b.nc.Drain()
		for i := 0; i < 100 && !b.nc.IsClosed(); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		b.nc.Close()
	}
	b.mu.Lock()
	for _, p := range b.parts {
		p.Close()
	}
	b.parts = map[string]*partitioner.WASM{}
	b.mu.Unlock()
	if b.rt != nil {
		_ = b.rt.Close(context.Background())
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	_ = b.dirLock.Release()
	return nil
}

// spawn runs f on a goroutine of its own that Close and Abort wait for. Once they have begun to
// wait it runs nothing: a WaitGroup must not grow beside its Wait (a -race report, a subscription
// handler starting a goroutine while Close waited), and a request then goes unanswered, as it
// would to a stopped broker, and its sender retries.
func (b *Broker) spawn(f func()) {
	b.spawnMu.Lock()
	defer b.spawnMu.Unlock()
	if b.spawnStopped {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

func (b *Broker) stopSpawning() {
	b.spawnMu.Lock()
	b.spawnStopped = true
	b.spawnMu.Unlock()
}

// Abort stops the broker at once, as a crash would: no request in progress is answered, nothing is
// flushed beyond what JetStream already stored. Fault-injection tests use it; a later Start on the
// same data directory resumes whatever was in progress.
func (b *Broker) Abort() {
	if b.loopStop != nil {
		b.loopStop()
	}
	for _, s := range b.subs {
		_ = s.Unsubscribe()
	}
	if b.stop != nil {
		b.stop()
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.ps.nc != nil {
		b.ps.nc.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	b.stopSpawning()
	b.wg.Wait()
	b.loopWG.Wait()
	if b.rt != nil {
		_ = b.rt.Close(context.Background())
	}
	_ = b.dirLock.Release() // as the kernel does for a crashed process
}

// handler is one API endpoint.
type handler func(ctx context.Context, m *nats.Msg) (any, error)

func (b *Broker) subscribe() error {
	routes := map[string]handler{
		wire.APITopicGet:      b.apiTopicGet,
		wire.APITopicList:     b.apiTopicList,
		wire.APIPluginGet:     b.apiPluginGet,
		wire.APIPluginInfo:    b.apiPluginInfo,
		wire.APIPluginList:    b.apiPluginList,
		wire.APIGroupList:     b.apiGroupList,
		wire.AdminPluginPut:   b.apiPluginUpload,
		wire.AdminPluginDel:   b.apiPluginDelete,
		wire.AdminTopicNew:    b.apiTopicCreate,
		wire.AdminTopicDel:    b.apiTopicDelete,
		wire.AdminTopicEdit:   b.apiTopicRepartition,
		wire.AdminTopicSet:    b.apiTopicSet,
		wire.AdminTopicRetire: b.apiTopicRetire,
	}
	b.credsRoutes(routes) // creds.go
	for subj, h := range routes {
		h := h
		s, err := b.nc.QueueSubscribe(subj, "pctl-broker", func(m *nats.Msg) {
			if relayed(m, true) { // auth.go: not from a client allowed to publish here
				b.cfg.Logf("broker: ignored a request on %s relayed by JetStream (reply %q)", m.Subject, m.Reply)
				return
			}
			b.spawn(func() { b.serve(m, h) })
		})
		if err != nil {
			return err
		}
		b.subs = append(b.subs, s)
	}
	// The produce service: the shared subject (one broker of the queue group) and this broker's
	// own (spec/protocol.md §5.2). Each subscription handles its requests in arrival order.
	for _, subj := range []string{wire.ProducePrefix + ".*", wire.ProduceBrokerSubject("*", b.id)} {
		s, err := b.nc.QueueSubscribe(subj, "pctl-broker", func(m *nats.Msg) {
			if relayed(m, false) { // auth.go
				b.cfg.Logf("broker: ignored a produce request on %s relayed by JetStream (reply %q)", m.Subject, m.Reply)
				return
			}
			b.produce(m)
		})
		if err != nil {
			return err
		}
		_ = s.SetPendingLimits(1<<20, 256<<20)
		b.subs = append(b.subs, s)
	}
	if err := b.subscribeCreds(); err != nil {
		return err
	}
	if err := b.subscribeSteps(); err != nil {
		return err
	}
	return b.nc.Flush()
}

func (b *Broker) serve(m *nats.Msg, h handler) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	stopKeepalive := keepalive(m)
	v, err := h(ctx, m)
	stopKeepalive() // the last keep-alive is out before the answer (one connection, in order)
	if op, ok := strings.CutPrefix(m.Subject, wire.AdminPrefix+"."); ok {
		b.hookAdmin(op, time.Since(start), err) // hooks.go
	}
	if m.Reply == "" {
		return
	}
	if err != nil {
		respondErr(m, err)
		return
	}
	if raw, ok := v.(rawReply); ok {
		out := nats.NewMsg(m.Reply)
		out.Data = raw.data
		for k, vs := range raw.headers {
			out.Header[k] = vs
		}
		_ = m.RespondMsg(out)
		return
	}
	body, err := json.Marshal(v)
	if err != nil {
		respondErr(m, err)
		return
	}
	_ = m.Respond(body)
}

// KeepaliveInterval is how often a broker sends keep-alives while it works on a request that
// asked for them (spec/protocol.md §3).
const KeepaliveInterval = time.Second

// keepalive answers a request that carries Pctl-Keepalive with a keep-alive at once and then
// every KeepaliveInterval, until the returned stop is called: a client then tells a broker that
// works on its request (an epoch change can take minutes) from one that died with it.
func keepalive(m *nats.Msg) (stop func()) {
	if m.Reply == "" || m.Header == nil || m.Header.Get(wire.HeaderKeepalive) == "" {
		return func() {}
	}
	send := func() {
		ka := nats.NewMsg(m.Reply)
		ka.Header.Set(wire.HeaderKeepalive, "1")
		_ = m.RespondMsg(ka)
	}
	send()
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(KeepaliveInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				send()
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

type rawReply struct {
	data    []byte
	headers nats.Header
}

// detailed attaches a JSON detail (e.g. a conformance report) to an error reply.
type detailed struct {
	err    error
	detail any
}

func (d *detailed) Error() string { return d.err.Error() }
func (d *detailed) Unwrap() error { return d.err }

func respondErr(m *nats.Msg, err error) { respondErrWith(m, err, nil) }

// respondErrWith answers with an error reply carrying extra headers.
func respondErrWith(m *nats.Msg, err error, headers nats.Header) {
	reply := wire.ErrorReply{Code: wire.Code(err), Message: err.Error()}
	var d *detailed
	var creating *wire.TopicCreatingError
	switch {
	case errors.As(err, &d):
		reply.Detail = d.detail
	case errors.As(err, &creating):
		reply.Detail = creating.Detail() // spec/protocol.md §3: clients wait by it
	}
	body, _ := json.Marshal(reply)
	out := nats.NewMsg(m.Reply)
	for k, v := range headers {
		out.Header[k] = v
	}
	out.Header.Set(wire.HeaderError, reply.Code)
	out.Data = body
	_ = m.RespondMsg(out)
}

func decode(m *nats.Msg, v any) error {
	if len(m.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return fmt.Errorf("%w: request body is not valid JSON: %v", wire.ErrBadRequest, err)
	}
	return nil
}
