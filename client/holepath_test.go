package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
)

// TestClusterHolePathStepDowns: on a 3-node cluster (embedded nats-servers, an R3 partition
// stream), a producer sends one key only, so every fast batch holds one record (the per-key
// rule), while the stream's leader is made to step down again and again. After every step-down
// the next batch is read back before its record counts (spec/protocol.md §5.1.2), and a record
// the read does not find gets a new deduplication id (the hole path): a read that misses a stored
// record stores it twice. The storage check wants every acknowledged record stored exactly once,
// in order (no duplicates at all: nothing crashed), and a record that failed may only have failed
// with a typed "unavailable" error (an id stuck in process, §5.1.5). The short acknowledgement
// timeout makes batches around each election settle (timeouts, closing EOBs, searches) as well.
// A read-back that misses stored records (the mutant: it finds nothing) fails the check with
// duplicates; the one interleaving of a real miss (a lagging member's stream info after a
// search) is too narrow to time here and is pinned by TestReadBackReachesTheLeadersEnd.
// PCTL_HOLEPATH_ACK, PCTL_HOLEPATH_PAUSE and PCTL_HOLEPATH_STEPS make longer runs.
func TestClusterHolePathStepDowns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	const topic = "holepath"
	stepDowns, pause := holepathSteps()
	tc := startTestCluster(t, 3)
	startClusterBroker(t, tc, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := clusterConnect(t, tc, 0, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 1, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	prodConn, err := client.Connect(ctx, client.Options{URL: tc.url(1), Creds: tc.creds[broker.RoleProducer], Timeout: 20 * time.Second, AckTimeout: holepathAck()})
	if err != nil {
		t.Fatal(err)
	}
	defer prodConn.Close()
	p, err := prodConn.NewProducer(ctx, topic, client.ProducerOptions{Logf: quietLogf(t)})
	if err != nil {
		t.Fatal(err)
	}
	stream := wire.StreamName(topic, 0)
	finished := make(chan struct{}) // closed after the last step-down
	var stepped int
	go func() {
		defer close(finished)
		for stepped < stepDowns && ctx.Err() == nil {
			time.Sleep(pause + time.Duration(37*(stepped%7))*time.Millisecond)
			m, err := admin.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 5*time.Second)
			if err == nil && !strings.Contains(string(m.Data), `"success":true`) {
				err = errors.New(string(m.Data))
			}
			if err != nil {
				t.Logf("step-down %d: %v", stepped+1, err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			stepped++
		}
	}()
	var mu sync.Mutex
	var sent []verify.Sent
	var failed []error
	key := []byte("hot")
	for i := 0; ; i++ {
		select {
		case <-finished:
		default:
			if i > 0 && i%50 == 0 {
				// Keep the producer's buffer short: every record is a batch of its own anyway.
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Send(ctx, client.Record{Key: key, Value: []byte(fmt.Sprint(i))}, func(r client.Result) {
				mu.Lock()
				sent = append(sent, verify.Sent{Producer: p.ID(), PSeq: r.ProducerSeq, Key: key, Acked: r.Err == nil})
				if r.Err != nil {
					failed = append(failed, r.Err)
				}
				mu.Unlock()
			}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		break
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stored := storedInOrder(ctx, t, admin.JetStream(), topic, 1)
	mu.Lock()
	defer mu.Unlock()
	res := verify.Check(sent, stored, verify.Options{Groups: []string{"storage"}, NoDuplicates: true})
	reads, past := client.ReadBacks(p)
	t.Logf("%d step-downs; %d records, %d failed, %d stored; %d batches settled, %d read back after a leader change, %d records found above the stream info's last sequence, %d holes re-sent under new ids; duplicates %d",
		stepped, len(sent), len(failed), len(stored), p.Settled(), reads, past, p.Holes(), res.Group("storage").Duplicates)
	if stepped == 0 || reads == 0 {
		t.Fatalf("%d step-downs, %d batches read back: the hole path did not run", stepped, reads)
	}
	for _, err := range failed {
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("a record failed with %v: only an id stuck in process may fail a record here (spec §5.1.5)", err)
		}
	}
	if !res.OK() {
		t.Fatalf("storage check failed:\n%s", res)
	}
}

// holepathAck is the producer's acknowledgement timeout: PCTL_HOLEPATH_ACK, default 150 ms.
func holepathAck() time.Duration {
	if v, err := time.ParseDuration(os.Getenv("PCTL_HOLEPATH_ACK")); err == nil {
		return v
	}
	return 150 * time.Millisecond
}

// holepathSteps is how many step-downs to make and the pause before each (plus up to 222 ms):
// PCTL_HOLEPATH_STEPS and PCTL_HOLEPATH_PAUSE, default 30 after 250 ms.
func holepathSteps() (int, time.Duration) {
	if v, err := time.ParseDuration(os.Getenv("PCTL_HOLEPATH_PAUSE")); err == nil {
		n, _ := strconv.Atoi(os.Getenv("PCTL_HOLEPATH_STEPS"))
		return max(n, 1), v
	}
	return 30, 250 * time.Millisecond
}
