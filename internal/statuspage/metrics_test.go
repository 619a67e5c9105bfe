package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/metrics"
)

// TestMetricsFromTheBrokersState: after N records and a group that acknowledged exactly K of
// them, /metrics says N records in epoch 1 and a lag of N-K for the group (both known here
// independently of the broker), with the member's lease given back.
func TestMetricsFromTheBrokersState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := metrics.New(metrics.Options{PerPartition: true})
	s := New(Options{Metrics: m, MaxAge: time.Millisecond})
	s.SetBroker(ctx, b)
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "lag", Partitions: 1, Partitioner: "jump"}); err != nil {
		t.Fatal(err)
	}
	const n, k = 50, 20
	p, err := c.NewProducer(ctx, "lag", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprint(i)), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cn, err := c.NewConsumer(ctx, "lag", client.ConsumerOptions{Group: "g", FromBeginning: true})
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop here")
	seen := 0
	err = cn.Run(ctx, func(context.Context, *client.Message) error {
		if seen == k {
			return stop // the (k+1)th is not acknowledged: the group's position is the k-th
		}
		seen++
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("consumer: %v", err)
	}
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body = get(t, hs.URL+"/metrics")
		if strings.Contains(body, fmt.Sprintf(`pctl_group_lag_records{group="g",topic="lag"} %d`, n-k)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{
		fmt.Sprintf(`pctl_group_lag_records{group="g",topic="lag"} %d`, n-k),
		fmt.Sprintf(`pctl_group_partition_position{group="g",partition="0",topic="lag"} %d`, k),
		fmt.Sprintf(`pctl_topic_epoch_records_total{epoch="1",topic="lag"} %d`, n),
		fmt.Sprintf(`pctl_partition_last_sequence{partition="0",topic="lag"} %d`, n),
		`pctl_status_up 1`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, pctlLines(body))
		}
	}
}

func pctlLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "pctl_") && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
