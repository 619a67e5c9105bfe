package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/natsver"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

// Options configures Connect.
type Options struct {
	// URL of the broker. Default: $PCTL_SERVER, else nats://127.0.0.1:4222.
	URL string
	// Creds is an NKey seed file (admin.nk, producer.nk or consumer.nk from the broker's data
	// directory). Default: $PCTL_CREDS. Empty: connect without credentials.
	Creds string
	// Name is the connection name shown by the server.
	Name string
	// Timeout bounds each broker API request. Default 30s.
	Timeout time.Duration
	// Runtime runs the partitioner modules. Default: a runtime of its own (closed by Close).
	Runtime *runtime.Runtime
	// ReconnectWait is the pause between reconnection attempts after the broker went away.
	// Default 250ms (a restarted broker is back within a second or two).
	ReconnectWait time.Duration
	// AckTimeout bounds the wait for a publish acknowledgement; after it the publish counts as
	// ambiguous and is retried with the same deduplication id. Default 5s.
	AckTimeout time.Duration
	// SharedInbox makes an NKey user receive its replies under the shared _INBOX prefix instead
	// of its private one, _INBOX_<public key> (spec/protocol.md §8), for a NATS server whose
	// configuration predates private inboxes. Scoped credentials need the private one.
	SharedInbox bool
	// NativeBuiltins lets producers and consumers partition with the Go implementation of a
	// built-in when an epoch's module is exactly that built-in's, without config (the native fast
	// path of spec/builtins.md; bit-identical by partitioner's million-key test and the vectors).
	// Default off: the WebAssembly module, the reference, runs.
	NativeBuiltins bool
}

// Client is a connection to a broker. It is safe for concurrent use.
type Client struct {
	opts    Options
	nc      *nats.Conn
	js      jetstream.JetStream
	rt      *runtime.Runtime
	ownRT   bool
	mu      sync.Mutex
	parts   map[string]*partitioner.WASM // digest/config -> partitioner
	modules map[string][]byte            // digest -> verified bytes

	vmu        sync.Mutex
	violations map[string][]chan struct{} // subject -> waiters
	listeners  produce.Listeners          // violation and connection listeners

	pconnOnce sync.Once
	pconn     *produce.Conn // the producer engine's view of the connection (producer.go)

	thin thinIdentity // ProduceBrokerSide's producer id and sequence (thin.go)
}

// Connect connects to a broker.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	if opts.URL == "" {
		opts.URL = os.Getenv("PCTL_SERVER")
	}
	if opts.URL == "" {
		opts.URL = "nats://127.0.0.1:4222"
	}
	if err := CheckServerURL(opts.URL); err != nil {
		return nil, err
	}
	if opts.Creds == "" {
		opts.Creds = os.Getenv("PCTL_CREDS")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "pctl-client"
	}
	if opts.ReconnectWait == 0 {
		opts.ReconnectWait = 250 * time.Millisecond
	}
	if opts.AckTimeout == 0 {
		opts.AckTimeout = 5 * time.Second
	}
	c := &Client{opts: opts, parts: map[string]*partitioner.WASM{}, modules: map[string][]byte{}, violations: map[string][]chan struct{}{}}
	nopts := []nats.Option{nats.Name(opts.Name), nats.MaxReconnects(-1), nats.ReconnectWait(opts.ReconnectWait),
		nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond), nats.ErrorHandler(c.onAsyncError),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { c.connEvent(false) }),
		nats.ReconnectHandler(func(*nats.Conn) { c.connEvent(true) })}
	if opts.Creds != "" {
		o, err := nats.NkeyOptionFromSeed(opts.Creds)
		if err != nil {
			return nil, fmt.Errorf("%w: credentials %s: %w (use a .nk seed file from the broker's data directory)", wire.ErrBadRequest, opts.Creds, err)
		}
		nopts = append(nopts, o)
		if !opts.SharedInbox {
			if pub, err := publicKey(opts.Creds); err == nil {
				nopts = append(nopts, nats.CustomInboxPrefix(wire.InboxPrefix(pub)))
			}
		}
	}
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
			return nil, fmt.Errorf("%w: the broker at %s refused the credentials %q: %v; use admin.nk, producer.nk or consumer.nk from the broker's data directory (--creds or PCTL_CREDS)", wire.ErrPermission, opts.URL, opts.Creds, err)
		}
		return nil, fmt.Errorf("%w: cannot connect to %s: %v; is 'pctl serve' running? (--server or PCTL_SERVER)", wire.ErrUnavailable, opts.URL, err)
	}
	c.nc = nc
	c.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1<<16), jetstream.WithPublishAsyncTimeout(opts.AckTimeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.rt = opts.Runtime
	if c.rt == nil {
		if c.rt, err = runtime.New(ctx, runtime.Config{}); err != nil {
			nc.Close()
			return nil, err
		}
		c.ownRT = true
	}
	return c, nil
}

// Conn returns the underlying NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// JetStream returns the JetStream context of the connection.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// Close closes the connection and the partitioners.
func (c *Client) Close() error {
	c.mu.Lock()
	for _, p := range c.parts {
		p.Close()
	}
	c.parts = map[string]*partitioner.WASM{}
	c.mu.Unlock()
	if c.nc != nil {
		_ = c.nc.Drain()
		for i := 0; i < 200 && !c.nc.IsClosed(); i++ {
			time.Sleep(5 * time.Millisecond)
		}
		c.nc.Close()
	}
	if c.ownRT {
		_ = c.rt.Close(context.Background())
	}
	return nil
}

func (c *Client) onAsyncError(_ *nats.Conn, _ *nats.Subscription, err error) {
	subject, ok := produce.ViolationSubject(err)
	if !ok {
		return
	}
	c.vmu.Lock()
	for _, ch := range c.violations[subject] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	c.vmu.Unlock()
	c.listeners.Violation(subject)
}

func (c *Client) watchViolation(subject string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.vmu.Lock()
	c.violations[subject] = append(c.violations[subject], ch)
	c.vmu.Unlock()
	return ch, func() {
		c.vmu.Lock()
		defer c.vmu.Unlock()
		l := c.violations[subject]
		for i, x := range l {
			if x == ch {
				c.violations[subject] = append(l[:i], l[i+1:]...)
				break
			}
		}
		if len(c.violations[subject]) == 0 {
			delete(c.violations, subject)
		}
	}
}

// onViolation registers f to be called with the subject of every permissions violation the
// server reports on this connection; the returned function unregisters it (a producer's Close,
// the end of a consumer's Run), so a long-lived client does not collect listeners.
func (c *Client) onViolation(f func(subject string)) func() { return c.listeners.OnViolation(f) }

// onConnEvent registers f to be called when the connection is lost (false) and back (true);
// the returned function unregisters it.
func (c *Client) onConnEvent(f func(connected bool)) func() { return c.listeners.OnConnEvent(f) }

func (c *Client) connEvent(connected bool) { c.listeners.ConnEvent(connected) }

// MinServerVersion is the oldest nats-server pctl's producer and consumer run on: fast batch
// publishing (spec/protocol.md §5.1), and the conditioned write that proves a new consumer group
// absent (§6.1). NewProducer and NewConsumer refuse an older server with wire.ErrUnavailable.
const MinServerVersion = natsver.Min

// permissionError is returned when the connection's role may not use a subject.
func permissionError(subject string) error { return produce.PermissionError(subject) }

// request sends a JSON request (or raw bytes) and decodes a JSON reply into out (or returns the raw
// message when out is nil). Broker errors come back as *wire.RemoteError.
func (c *Client) request(ctx context.Context, subject string, req any, out any) (*nats.Msg, error) {
	var body []byte
	switch r := req.(type) {
	case nil:
	case []byte:
		body = r
	default:
		var err error
		if body, err = json.Marshal(r); err != nil {
			return nil, err
		}
	}
	limit := requestLimit(ctx, c.opts.Timeout)
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	viol, stop := c.watchViolation(subject)
	defer stop()
	type result struct {
		m   *nats.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		var m *nats.Msg
		var err error
		switch {
		case strings.HasPrefix(subject, wire.AdminPrefix+"."):
			m, err = c.requestKeepalive(ctx, subject, body, adminTakeWait) // admin work can take minutes
		case strings.HasPrefix(subject, wire.APIPrefix+"."):
			m, err = c.requestRead(ctx, subject, body)
		default:
			m, err = c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: body})
		}
		done <- result{m, err}
	}()
	var res result
	select {
	case <-viol:
		cancel()
		return nil, permissionError(subject)
	case res = <-done:
	}
	if res.err != nil {
		select {
		case <-viol:
			return nil, permissionError(subject)
		case <-time.After(20 * time.Millisecond):
		}
		if errors.Is(res.err, errNotTaken) {
			return nil, fmt.Errorf("%w: no broker took %s within %v (not even a keep-alive: the broker it reached may have died); whether the request took effect is unknown: look before asking again", wire.ErrUnavailable, subject, adminTakeWait)
		}
		if errors.Is(res.err, errBrokerGone) {
			return nil, fmt.Errorf("%w: the broker that took %s stopped answering (no keep-alive for %v: it died or lost its connection); whether the request took effect is unknown: look before asking again", wire.ErrUnavailable, subject, keepaliveSilence)
		}
		if errors.Is(res.err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("%w: no broker answers %s; is 'pctl serve' running and connected to %s?", wire.ErrUnavailable, subject, c.opts.URL)
		}
		if errors.Is(res.err, context.DeadlineExceeded) || errors.Is(res.err, nats.ErrTimeout) {
			return nil, fmt.Errorf("%w: the broker did not answer %s within %v", wire.ErrUnavailable, subject, limit)
		}
		return nil, fmt.Errorf("%w: %s: %v", wire.ErrUnavailable, subject, res.err)
	}
	m := res.m
	if code := m.Header.Get(wire.HeaderError); code != "" {
		var er struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Detail  json.RawMessage `json:"detail"`
		}
		_ = json.Unmarshal(m.Data, &er)
		if er.Code == "" {
			er.Code = code
		}
		return nil, &wire.RemoteError{Code: er.Code, Message: er.Message, Detail: er.Detail}
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			return nil, fmt.Errorf("%w: bad reply to %s: %v", wire.ErrInternal, subject, err)
		}
	}
	return m, nil
}

// keepaliveSilence: once a broker sent a keep-alive for a request, this long without another (or
// the answer) means it is gone (spec/protocol.md §3: brokers send one every second).
const keepaliveSilence = 5 * time.Second

var errBrokerGone = errors.New("the broker stopped sending keep-alives")

// errNotTaken: no broker answered a request, not even with a keep-alive, within readTakeWait.
var errNotTaken = errors.New("no broker took the request")

// readTakeWait is how long a read waits for its first keep-alive before it is sent again: a
// request routed to a broker whose connection was dying is lost without a trace.
const readTakeWait = 5 * time.Second

// requestLimit is how long a request may wait for its answer: the client's timeout, or what is
// left of the caller's deadline when that comes first (a producer's descriptor read waits its
// acknowledgement timeout, at least 1 s), rounded to the millisecond for the error message, which
// names the wait that ran out rather than the client's default.
func requestLimit(ctx context.Context, timeout time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < timeout {
			timeout = max(left.Round(time.Millisecond), 0)
		}
	}
	return timeout
}

// adminTakeWait is how long an admin request waits for its first keep-alive (a broker sends one
// as soon as it takes the request) before it fails: it is not sent again, since it changes state.
const adminTakeWait = 10 * time.Second

// requestRead sends a read (pctl.api.*: idempotent) with keep-alives, and sends it again, until
// ctx ends, when no broker took it or the broker that took it is gone: a member or a producer
// must not fail because one broker died or lost its node with its request.
func (c *Client) requestRead(ctx context.Context, subject string, body []byte) (*nats.Msg, error) {
	for {
		m, err := c.requestKeepalive(ctx, subject, body, readTakeWait)
		if (errors.Is(err, errBrokerGone) || errors.Is(err, errNotTaken)) && ctx.Err() == nil {
			continue
		}
		return m, err
	}
}

// requestKeepalive sends a request asking for keep-alives (spec/protocol.md §3) and returns the
// answer. After a first keep-alive, a silence of keepaliveSilence fails it with errBrokerGone: the
// broker that took it died, and no answer will come. Before the first, it waits until ctx ends
// (a broker that sends no keep-alives, an older one, is waited for as a plain request is), or for
// takeWait if it is not 0 (then errNotTaken).
func (c *Client) requestKeepalive(ctx context.Context, subject string, body []byte, takeWait time.Duration) (*nats.Msg, error) {
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req := nats.NewMsg(subject)
	req.Reply, req.Data = inbox, body
	req.Header.Set(wire.HeaderKeepalive, "1")
	if err := c.nc.PublishMsg(req); err != nil {
		return nil, err
	}
	alive := false
	for {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		switch {
		case alive:
			wctx, cancel = context.WithTimeout(ctx, keepaliveSilence)
		case takeWait > 0:
			wctx, cancel = context.WithTimeout(ctx, takeWait)
		}
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && alive:
			return nil, errBrokerGone
		case err != nil && ctx.Err() == nil && takeWait > 0:
			return nil, errNotTaken
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		case m.Header.Get("Status") == "503" && len(m.Data) == 0:
			return nil, nats.ErrNoResponders
		case m.Header.Get(wire.HeaderKeepalive) != "" && len(m.Data) == 0 && m.Header.Get(wire.HeaderError) == "":
			alive = true
		default:
			return m, nil
		}
	}
}
