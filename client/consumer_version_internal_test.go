package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// versionProxy forwards TCP connections to a real nats-server and rewrites the "version" of the
// server's INFO lines to claim: a real server that says it is older (nats-server cannot be told
// to report another version). Everything else passes through unchanged.
type versionProxy struct {
	ln    net.Listener
	claim string
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

var infoVersion = regexp.MustCompile(`"version":"[^"]*"`)

func newVersionProxy(t *testing.T, target, claim string) *versionProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &versionProxy{ln: ln, claim: claim}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { // server to client: every INFO (the first, and the one after CONNECT)
				defer p.wg.Done()
				defer c.Close()
				r := bufio.NewReader(s)
				for {
					line, err := r.ReadString('\n')
					if strings.HasPrefix(line, "INFO ") {
						line = infoVersion.ReplaceAllLiteralString(line, `"version":"`+claim+`"`)
					}
					if _, werr := io.WriteString(c, line); werr != nil || err != nil {
						return
					}
				}
			}()
			go func() {
				defer p.wg.Done()
				defer s.Close()
				_, _ = io.Copy(s, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// TestConsumerRefusesOldServer: a consumer refuses, before it writes any group key, a server
// older than nats-server 2.14.0 (spec/protocol.md §6.1, "The server version a consumer needs"),
// with unavailable and a message naming the server, its version, the minimum and what to do.
// Against a real broker: connected directly, nats.go reports the embedded server's own version
// (server.VERSION, the nats-server package's constant), the member is made and its join creates
// the group; through a proxy whose INFO claims an older version (2.10.22: no conditioned write;
// 2.11.0-RC.1 and 2.13.9: between the header's version and the minimum) NewConsumer and
// NewCoConsumer fail and the group has no key. The producer refuses the same servers (one check).
// A proxy claiming 2.14.0 passes, so the proxy itself is not what is refused.
func TestConsumerRefusesOldServer(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(url, role string) *Client {
		c, err := Connect(ctx, Options{URL: url, Creds: b.CredsPath(role), Timeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	admin := connect(b.ClientURL(), broker.RoleAdmin)
	for _, tp := range []string{"t", "u"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: tp, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	d, _, err := admin.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.js.KeyValue(ctx, wire.GroupsBucket)
	if err != nil {
		t.Fatal(err)
	}
	groupKeys := func(group string) []string {
		vals, err := watchInitial(ctx, kv, wire.GroupPrefix(d.ID, group)+">")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range vals {
			keys = append(keys, k)
		}
		return keys
	}

	// The real server: its own version, a member made, the group created by its join.
	direct := connect(b.ClientURL(), broker.RoleConsumer)
	if got := direct.nc.ConnectedServerVersion(); got != server.VERSION {
		t.Fatalf("nats.go reports %q, the embedded nats-server is %s", got, server.VERSION)
	}
	cn, err := direct.NewConsumer(ctx, "t", ConsumerOptions{Group: "real"})
	if err != nil {
		t.Fatalf("nats-server %s: %v", server.VERSION, err)
	}
	if _, err := cn.join(ctx); err != nil {
		t.Fatal(err)
	}
	if keys := groupKeys("real"); !strings.Contains(strings.Join(keys, " "), "g.created") {
		t.Fatalf("the real server's member did not create its group: keys %v", keys)
	}

	for _, claim := range []string{"2.10.22", "2.11.0-RC.1", "2.13.9", "2.14.0"} {
		px := newVersionProxy(t, strings.TrimPrefix(b.ClientURL(), "nats://"), claim)
		c := connect("nats://"+px.ln.Addr().String(), broker.RoleConsumer)
		if got := c.nc.ConnectedServerVersion(); got != claim {
			t.Fatalf("through the proxy nats.go reports %q, want %q", got, claim)
		}
		group := "g" + strings.NewReplacer(".", "_", "-", "_").Replace(claim)
		_, err := c.NewConsumer(ctx, "t", ConsumerOptions{Group: group})
		_, coErr := c.NewCoConsumer(ctx, []string{"t", "u"}, ConsumerOptions{Group: group})
		pr, prodErr := connect("nats://"+px.ln.Addr().String(), broker.RoleProducer).NewProducer(ctx, "t", ProducerOptions{ID: group})
		_, resetErr := c.ResetGroup(ctx, "t", group+"_reset", SeekBeginning)
		if claim == "2.14.0" {
			if err != nil || coErr != nil || prodErr != nil || resetErr != nil {
				t.Fatalf("a server claiming 2.14.0 refused: consumer %v, co-consumer %v, producer %v, reset %v", err, coErr, prodErr, resetErr)
			}
			_ = pr.Close(ctx)
			continue
		}
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("nats-server %s: NewConsumer = %v, want wire.ErrUnavailable", claim, err)
		}
		for _, part := range []string{px.ln.Addr().String(), `"` + claim + `"`, "pctl's consumer needs 2.14.0 or later", "§6.1", "upgrade the NATS servers"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("nats-server %s: %q does not say %q", claim, err, part)
			}
		}
		if !errors.Is(coErr, wire.ErrUnavailable) {
			t.Errorf("nats-server %s: NewCoConsumer = %v, want wire.ErrUnavailable", claim, coErr)
		}
		if !errors.Is(prodErr, wire.ErrUnavailable) || !strings.Contains(prodErr.Error(), "pctl's producer needs 2.14.0 or later") {
			t.Errorf("nats-server %s: NewProducer = %v, want the producer's refusal", claim, prodErr)
		}
		if keys := groupKeys(group); len(keys) != 0 {
			t.Errorf("nats-server %s: the refused member's group has keys %v", claim, keys)
		}
		// A reset of a group that does not exist would create it (§6.6): refused before any key.
		if !errors.Is(resetErr, wire.ErrUnavailable) || !strings.Contains(resetErr.Error(), "pctl's group reset needs 2.14.0 or later") {
			t.Errorf("nats-server %s: ResetGroup = %v, want the reset's refusal", claim, resetErr)
		}
		if keys := groupKeys(group + "_reset"); len(keys) != 0 {
			t.Errorf("nats-server %s: the refused reset's group has keys %v", claim, keys)
		}
	}
}
