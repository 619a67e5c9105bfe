package crosslang

import (
	"context"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// A group created with the sticky assignor (spec/protocol.md §6.1) by a Go member: every SDK's
// consumer, which implements only modulo, refuses to join it with code unsupported instead of
// taking partitions by i mod M beside the Go members (which would never let the group settle).
// Before the SDKs read g.assignor they joined and ran.
func TestStickyGroupRefusedAcrossLanguages(t *testing.T) {
	sdks := groupLanguages(t)
	if len(sdks) == 0 {
		t.Skip("no SDK consumer to try (groupLanguages says why)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	const topic, group = "xs", "sticky"
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	cn, err := connect(t, b, broker.RoleConsumer).NewConsumer(ctx, topic, client.ConsumerOptions{Group: group, Member: "go-1", Assignor: wire.AssignorSticky, Heartbeat: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- cn.Run(rctx, func(context.Context, *client.Message) error { return nil }) }()
	defer func() { stop(); <-done }()
	waitUntil(t, 30*time.Second, "the Go member in the group", func() bool { return len(liveMembers(ctx, admin, topic, group)) == 1 }, func() string { return "" })

	dir := t.TempDir()
	for i := range sdks {
		m := startGroupMember(t, dir, b, &sdks[i], topic, group, sdks[i].name+"-1")
		select {
		case <-m.exited:
		case <-time.After(60 * time.Second):
			m.kill(9)
			t.Errorf("%s: the consumer kept running in a sticky group (stderr: %s)", sdks[i].name, m.stderr())
			continue
		}
		if m.waitErr == nil {
			t.Errorf("%s: the consumer exited with status 0 in a sticky group; want a refusal", sdks[i].name)
		}
		if se := m.stderr(); !strings.Contains(se, "unsupported") && !strings.Contains(se, "assignor") {
			t.Errorf("%s: the refusal does not name the assignor or the code: %s", sdks[i].name, se)
		}
		if got := liveMembers(ctx, admin, topic, group); len(got) != 1 {
			t.Errorf("%s: live members %v after the refusal: the refused member took part", sdks[i].name, got)
		}
	}
}
