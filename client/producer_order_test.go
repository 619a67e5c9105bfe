package client_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/netproxy"
)

// TestOrderSurvivesCutConnections: a pipelined producer whose connection to one embedded server
// is cut (TCP reset) at random moments, again and again, while it sends many keys. Every
// acknowledged record must be stored exactly once, and each key's records must be stored in the
// producer's order — read back from the streams in stream order, not through a consumer. The
// old producer (1024 async publishes per partition in flight) lost publishes with the cut
// connection, stored later ones on the new connection, and retried the lost ones behind them.
func TestOrderSurvivesCutConnections(t *testing.T) {
	for _, seed := range seeds(1, 2) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { orderUnderCuts(t, seed) })
	}
}

func orderUnderCuts(t *testing.T, seed int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const topic, partitions = "cut", 4
	b := testBroker(t, topic, partitions)
	px, err := netproxy.New(hostPort(b.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	c := connectVia(t, b, px.Addr(), broker.RoleProducer, time.Second)
	p, err := c.NewProducer(ctx, topic, client.ProducerOptions{Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(seed))
	total, keys, cuts := 30000, 300, 12
	if raceEnabled {
		total = 8000
	}
	var mu sync.Mutex
	var sent []verify.Sent
	stop := make(chan struct{})
	var cutWG sync.WaitGroup
	cutWG.Add(1)
	go func() {
		defer cutWG.Done()
		crng := rand.New(rand.NewSource(seed * 7919))
		for i := 0; i < cuts; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+crng.Intn(120)) * time.Millisecond):
			}
			px.Cut()
		}
	}()
	for i := 0; i < total; i++ {
		key := []byte(fmt.Sprint("k", rng.Intn(keys)))
		err := p.Send(ctx, client.Record{Key: key, Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
			mu.Lock()
			sent = append(sent, verify.Sent{Producer: p.ID(), PSeq: r.ProducerSeq, Key: key, Acked: r.Err == nil})
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%2000 == 0 {
			time.Sleep(time.Duration(rng.Intn(20)) * time.Millisecond) // let cuts land mid-stream
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	cutWG.Wait()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	admin := thinConnect(t, b, broker.RoleAdmin)
	stored := storedInOrder(ctx, t, admin.JetStream(), topic, partitions)
	res := verify.Check(sent, stored, verify.Options{Groups: []string{"storage"}, NoDuplicates: true})
	acked := 0
	for _, s := range sent {
		if s.Acked {
			acked++
		}
	}
	t.Logf("seed %d: %d records, %d acknowledged, %d stored, %d connections cut (%d accepted)", seed, len(sent), acked, len(stored), cuts, px.Accepted())
	if len(sent) != total {
		t.Fatalf("%d results for %d records", len(sent), total)
	}
	if acked != total {
		t.Errorf("%d of %d records acknowledged: a cut connection must not fail records", acked, total)
	}
	if !res.OK() {
		t.Fatalf("storage order check failed:\n%s", res)
	}
}
