package client_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/internal/testhook"
)

// attempts counts, per (producer, seq), how many times the produce service handled a record.
type attempts struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attempts) add(producer string, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[producer+"/"+strconv.FormatUint(seq, 10)]++
}

func (a *attempts) get(producer string, seq uint64) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[producer+"/"+strconv.FormatUint(seq, 10)]
}

// checkStuckErr checks a thin client's error for a stuck record (spec/protocol.md §5.2 step 5):
// the in-process and the unavailable sentinel, and a message that says to read the partition.
func checkStuckErr(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, wire.ErrMsgIDInProcess) || !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("%s: got %v, want an error that is wire.ErrMsgIDInProcess and wire.ErrUnavailable (§5.2 step 5)", what, err)
	}
	if !strings.Contains(err.Error(), "read partition") || !strings.Contains(err.Error(), "before producing it again") {
		t.Fatalf("%s: message %q does not say to read the partition before producing it again", what, err)
	}
}

// TestThinClientsDoNotRetryStuckRecords runs both Go thin clients against a real broker whose
// producer engine fails chosen records with its real in-process error (produce.InProcessError,
// spec/protocol.md §5.1.5, put in place of the record's result by the broker's test hook: a single
// nats-server never answers 10158). The broker answers them unavailable with the in_process
// detail; §5.2 step 5 says a thin client MUST NOT re-send such a record under the same identity:
// each stuck record reaches the broker exactly once and fails with the in-process error, while
// the records around it are stored. Mutant shown failing: retryable() ignoring the detail (the
// client re-sends the stuck record until its timeout: the broker sees it many times).
func TestThinClientsDoNotRetryStuckRecords(t *testing.T) {
	var seen attempts
	stuckSeqs := map[uint64]bool{5: true, 150: true, 290: true}
	var thinID string
	var idMu sync.Mutex
	hook := func(topic, producer string, seq uint64, partition, epoch int) error {
		seen.add(producer, seq)
		idMu.Lock()
		tid := thinID
		idMu.Unlock()
		stuck := topic == "single" && seq == 1 || topic == "t" && producer == tid && stuckSeqs[seq]
		if !stuck {
			return nil
		}
		return &produce.InProcessError{Seq: seq, MsgID: producer + "-" + strconv.FormatUint(seq, 10) + "-x", Partition: partition, Answers: produce.InProcessLimit}
	}
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: quietLogf(t),
		Testing: &testhook.Broker{ProduceResult: hook}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := thinConnect(t, b, broker.RoleAdmin)
	for _, topic := range []string{"t", "single"} {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
			t.Fatal(err)
		}
	}
	// A short overall timeout: a client that retries anyway gives up after it, having sent the
	// record many times.
	prod, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleProducer), Timeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	t.Run("ProduceBrokerSide", func(t *testing.T) {
		// This client's first record (seq 1) on topic "single" is stuck.
		_, err := prod.ProduceBrokerSide(ctx, "single", client.Record{Key: []byte("k")})
		checkStuckErr(t, "ProduceBrokerSide", err)
		seen.mu.Lock()
		total := 0
		for k, n := range seen.n {
			if strings.HasSuffix(k, "/1") {
				total += n
			}
		}
		seen.mu.Unlock()
		if total != 1 {
			t.Fatalf("the stuck record reached the broker %d times, want once (§5.2 step 5: no re-send under the same identity)", total)
		}
		// The client goes on: its next record is stored.
		if _, err := prod.ProduceBrokerSide(ctx, "single", client.Record{Key: []byte("k")}); err != nil {
			t.Fatalf("the record after the stuck one: %v", err)
		}
	})

	t.Run("ThinProducer", func(t *testing.T) {
		tp, err := prod.NewThinProducer("t", client.ThinOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close(ctx)
		idMu.Lock()
		thinID = tp.ID()
		idMu.Unlock()
		const n = 300
		results := sendAll(ctx, t, tp, n, func(i int) client.Record {
			return client.Record{Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte(strconv.Itoa(i))}
		}, nil)
		for i := 1; i <= n; i++ {
			r := results[i]
			if r.ProducerSeq != uint64(i) {
				t.Fatalf("result %d has ProducerSeq %d", i, r.ProducerSeq)
			}
			if stuckSeqs[uint64(i)] {
				checkStuckErr(t, "record "+strconv.Itoa(i), r.Err)
				if got := seen.get(tp.ID(), uint64(i)); got != 1 {
					t.Fatalf("stuck record %d reached the broker %d times, want once (§5.2 step 5: no re-send under the same identity)", i, got)
				}
				continue
			}
			if r.Err != nil {
				t.Fatalf("record %d: %v (only the stuck records fail)", i, r.Err)
			}
		}
	})
}

// TestThinProducerStuckInBatchedReply runs the thin producer against a peer implementation of
// the produce service's wire (spec/protocol.md §5.2): a real nats-server and a responder that
// answers single and batched requests with the spec's reply bytes, written here by hand, and
// answers chosen records with §3's unavailable error and its in_process detail — inside a
// batched reply's results. (pctl's broker sends such a result only for a record its engine
// failed on 10158, which a single server never answers.) The probe's reply is held until every
// record is sent, so that the records waiting behind it go out as batches. Each stuck record must reach the
// responder once and fail with the in-process error; every other record is acknowledged.
// Mutants shown failing: retryable() ignoring the detail; the batched result's detail dropped
// by the client's decoding (ErrorReply.Remote without Detail).
func TestThinProducerStuckInBatchedReply(t *testing.T) {
	srv := plainNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const brokerID = "PEER1"
	stuck := map[uint64]bool{40: true, 41: true, 120: true}
	var mu sync.Mutex
	got := map[uint64]int{}
	inBatch := map[uint64]bool{}
	peer, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	errObj := func(seq uint64) map[string]any {
		return map[string]any{"code": "unavailable",
			"message": "record " + strconv.FormatUint(seq, 10) + " refused 4 times as 'in process' (10158); read partition 2 before producing it again",
			"detail":  map[string]any{"in_process": true, "partition": 2, "epoch": 1, "msg_id": "p-" + strconv.FormatUint(seq, 10) + "-tok"}}
	}
	// The probe's reply (to the shared subject) waits until every record is handed to the
	// producer, so that records 2..n wait behind it and go out in batched requests however slowly
	// the loop runs; the other replies come after 20 ms, in parallel.
	release := make(chan struct{})
	answer := func(m *nats.Msg) {
		if m.Subject == wire.ProduceSubject("t") {
			<-release
		}
		time.Sleep(20 * time.Millisecond)
		out := nats.NewMsg(m.Reply)
		out.Header.Set("Pctl-Broker", brokerID)
		if v := m.Header.Get("Pctl-Batch"); v != "" {
			n, _ := strconv.Atoi(v)
			var results []map[string]any
			data := m.Data
			for i := 0; i < n; i++ {
				// The layout of §5.2's table.
				seq := binary.BigEndian.Uint64(data)
				tl := int(data[8])
				data = data[9+tl:]
				if data[0] == 1 {
					k := binary.BigEndian.Uint32(data[1:])
					data = data[5+k:]
				} else {
					data = data[1:]
				}
				v := binary.BigEndian.Uint32(data)
				data = data[4+v:]
				mu.Lock()
				got[seq]++
				inBatch[seq] = true
				mu.Unlock()
				if stuck[seq] {
					results = append(results, map[string]any{"error": errObj(seq)})
				} else {
					results = append(results, map[string]any{"partition": 2, "epoch": 1, "seq": seq, "duplicate": false})
				}
			}
			out.Data, _ = json.Marshal(map[string]any{"results": results, "broker": brokerID})
		} else {
			seq, _ := strconv.ParseUint(m.Header.Get("Pctl-Seq"), 10, 64)
			mu.Lock()
			got[seq]++
			mu.Unlock()
			if stuck[seq] {
				out.Header.Set("Pctl-Error", "unavailable")
				out.Data, _ = json.Marshal(errObj(seq))
			} else {
				out.Data, _ = json.Marshal(map[string]any{"partition": 2, "epoch": 1, "seq": seq, "duplicate": false, "broker": brokerID})
			}
		}
		_ = peer.PublishMsg(out)
	}
	for _, subj := range []string{wire.ProduceSubject("t"), wire.ProduceBrokerSubject("t", brokerID)} {
		// Each request answered on a goroutine of its own, in parallel, as a broker's replies
		// come while later requests are in flight.
		if _, err := peer.Subscribe(subj, func(m *nats.Msg) { go answer(m) }); err != nil {
			t.Fatal(err)
		}
	}
	_ = peer.Flush()

	c, err := client.Connect(ctx, client.Options{URL: srv.ClientURL(), Timeout: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tp, err := c.NewThinProducer("t", client.ThinOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close(ctx)
	const n = 200
	results := sendAll(ctx, t, tp, n, func(int) client.Record { return client.Record{Key: []byte("k")} }, func() { close(release) })
	mu.Lock()
	defer mu.Unlock()
	batched := 0
	for seq := range stuck {
		if inBatch[seq] {
			batched++
		}
	}
	if batched == 0 {
		t.Fatalf("no stuck record went out in a batched request: the test did not exercise batched results")
	}
	for i := 1; i <= n; i++ {
		seq := uint64(i)
		if stuck[seq] {
			checkStuckErr(t, "record "+strconv.Itoa(i), results[i].Err)
			if got[seq] != 1 {
				t.Fatalf("stuck record %d reached the service %d times, want once (§5.2 step 5: no re-send under the same identity)", i, got[seq])
			}
			continue
		}
		if results[i].Err != nil {
			t.Fatalf("record %d: %v (only the stuck records fail)", i, results[i].Err)
		}
	}
	t.Logf("%d of %d stuck records went out in batched requests", batched, len(stuck))
}

// sendAll sends records 1..n (rec(i)) without waiting between them and returns their results,
// indexed by sequence (results[0] unused), once every one has its result.
// sent, if not nil, runs once every record is handed to the producer.
func sendAll(ctx context.Context, t *testing.T, tp *client.ThinProducer, n int, rec func(i int) client.Record, sent func()) []client.Result {
	t.Helper()
	results := make([]client.Result, n+1)
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Add(1)
		i := i
		if err := tp.Send(ctx, rec(i), func(r client.Result) { results[i] = r; wg.Done() }); err != nil {
			t.Fatal(err)
		}
	}
	if sent != nil {
		sent()
	}
	wg.Wait()
	return results
}
