package client_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

// TestBehindNamesPartitionsWithUnhandledRecords: Consumer.Behind (what `pctl consume
// --idle-exit` asks before it calls a member idle) names the partitions holding records the
// member has not handled. A member whose handler holds the first record of one partition while
// it handles every other partition's records must report that partition, and only it; once the
// handler lets go and the member handled everything, nothing. A real broker and streams; the
// expected partitions come from the producer's acknowledgements, not from the consumer.
func TestBehindNamesPartitionsWithUnhandledRecords(t *testing.T) {
	b := testBroker(t, "bh", 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prod := thinConnect(t, b, broker.RoleProducer)
	p, err := prod.NewProducer(ctx, "bh", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perPart := map[int]int{}
	for i := 0; i < 60; i++ {
		r, err := p.Produce(ctx, client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		if err != nil {
			t.Fatal(err)
		}
		perPart[r.Partition]++
	}
	held := -1
	for q := 0; q < 4; q++ {
		if perPart[q] > 0 {
			held = q
			break
		}
	}
	if len(perPart) < 2 {
		t.Fatalf("records landed in %d partitions; the test needs two or more", len(perPart))
	}
	others := 60 - perPart[held]

	cons := thinConnect(t, b, broker.RoleConsumer)
	cn, err := cons.NewConsumer(ctx, "bh", client.ConsumerOptions{Group: "g", FromBeginning: true, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var mu sync.Mutex
	got := map[int]int{}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	runErr := make(chan error, 1)
	go func() {
		runErr <- cn.Run(rctx, func(ctx context.Context, m *client.Message) error {
			if m.Partition == held {
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			mu.Lock()
			got[m.Partition]++
			mu.Unlock()
			return nil
		})
	}()
	handled := func(all bool) bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for q, c := range got {
			if all || q != held {
				n += c
			}
		}
		if all {
			return n == 60
		}
		return n == others
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within a minute", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("delivery of every record outside the held partition", func() bool { return handled(false) })
	behind, err := cn.Behind(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(behind, []int{held}) {
		t.Fatalf("Behind = %v while the handler holds partition %d's first record (its other partitions all handled): want [%d]", behind, held, held)
	}
	close(release)
	waitFor("delivery of every record", func() bool { return handled(true) })
	var last []int
	waitFor("an empty Behind after every record was handled", func() bool {
		last, err = cn.Behind(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(last) == 0
	})
	rcancel()
	if err := <-runErr; err != nil && ctx.Err() == nil && rctx.Err() == nil {
		t.Fatal(err)
	}
}
