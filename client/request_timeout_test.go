package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// TestRequestTimeoutMessageNamesTheRealWait: a read nobody answers fails with unavailable, and
// its message names the wait that ran out: the caller's deadline when it comes before the
// client's timeout (a producer's descriptor read waits its acknowledgement timeout, at least 1 s,
// and said "within 30s"), the client's timeout otherwise. A real nats-server; the broker is a
// subscriber on pctl.api.topic.get that swallows every request.
func TestRequestTimeoutMessageNamesTheRealWait(t *testing.T) {
	s := EmbeddedNATS(t, false)
	hole, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hole.Close)
	if _, err := hole.QueueSubscribe(wire.APITopicGet, "pctl-broker", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := hole.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		clientTimeout time.Duration // 0: the default, 30 s
		callerTimeout time.Duration
		want, wantNot string
	}{
		{name: "caller's 300ms under the default 30s", callerTimeout: 300 * time.Millisecond, want: "within 300ms", wantNot: "30s"},
		{name: "caller's 1.2s under the default 30s", callerTimeout: 1200 * time.Millisecond, want: "within 1.2s", wantNot: "30s"},
		{name: "caller's 700ms under a client timeout of 5s", clientTimeout: 5 * time.Second, callerTimeout: 700 * time.Millisecond, want: "within 700ms", wantNot: "5s"},
		{name: "the client's 400ms under a caller's minute", clientTimeout: 400 * time.Millisecond, callerTimeout: time.Minute, want: "within 400ms", wantNot: "1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Connect(context.Background(), Options{URL: s.ClientURL(), Timeout: tc.clientTimeout})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), tc.callerTimeout)
			defer cancel()
			_, _, err = c.Topic(ctx, "t")
			if !errors.Is(err, wire.ErrUnavailable) {
				t.Fatalf("a read nobody answers: %v, want unavailable", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.wantNot) {
				t.Fatalf("message %q: want %q in it and not %q (the wait that ran out, not the client's default)", msg, tc.want, tc.wantNot)
			}
		})
	}
}
