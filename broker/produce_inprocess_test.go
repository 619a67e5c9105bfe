package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/internal/testhook"
)

// TestProduceServiceInProcessDetail: a record that the producer engine fails because its
// Nats-Msg-Id is stuck "in process" (spec/protocol.md §5.1.5) is answered, by a single reply and
// as a record's result in a batched one, with code unavailable and the detail
// {"in_process": true, "partition", "epoch", "msg_id"} of §3, read here from the raw reply bytes
// by the spec's field names. The engine's failure is the real internal/produce error
// (produce.InProcessError), put in place of the record's result by the broker's test hook: a
// single nats-server never answers 10158. The other records of the batch are stored as usual.
// Mutant shown failing: the broker dropping the detail (recordDetail returning nil).
func TestProduceServiceInProcessDetail(t *testing.T) {
	const producer = "P"
	stuck := map[uint64]bool{2: true, 4: true}
	var mu sync.Mutex
	where := map[uint64][2]int{} // seq -> partition, epoch the engine produced it in
	hook := func(topic, prod string, seq uint64, partition, epoch int) error {
		if topic != "t" || prod != producer {
			return nil
		}
		mu.Lock()
		where[seq] = [2]int{partition, epoch}
		mu.Unlock()
		if !stuck[seq] {
			return nil
		}
		return &produce.InProcessError{Seq: seq, MsgID: producer + "-" + strconv.FormatUint(seq, 10) + "-" + tok32, Partition: partition, Answers: produce.InProcessLimit}
	}
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Logf: t.Logf,
		Testing: &testhook.Broker{ProduceResult: hook}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, b, broker.RoleProducer).Conn()
	request := func(m *nats.Msg) *nats.Msg {
		t.Helper()
		r, err := nc.RequestMsg(m, 20*time.Second)
		if err != nil {
			t.Fatalf("request to %s: %v", m.Subject, err)
		}
		return r
	}
	// checkErr checks an error object of §3 for the record seq: code unavailable, and the detail.
	checkErr := func(what string, e map[string]any, seq uint64) {
		t.Helper()
		if e["code"] != "unavailable" {
			t.Fatalf("%s: code %v, want unavailable (§5.1.5: the record's fate is unknown)", what, e["code"])
		}
		if msg, _ := e["message"].(string); msg == "" {
			t.Fatalf("%s: no message", what)
		}
		d, ok := e["detail"].(map[string]any)
		if !ok {
			t.Fatalf("%s: no detail object (got %v): a thin client cannot tell a stuck record from a broker failure and re-sends it until its timeout (§5.2 step 5)", what, e["detail"])
		}
		mu.Lock()
		pe := where[seq]
		mu.Unlock()
		want := map[string]any{"in_process": true, "partition": float64(pe[0]), "epoch": float64(pe[1]), "msg_id": producer + "-" + strconv.FormatUint(seq, 10) + "-" + tok32}
		for k, v := range want {
			if d[k] != v {
				t.Fatalf("%s: detail %s = %v, want %v (detail %v)", what, k, d[k], v, d)
			}
		}
	}
	single := func(seq uint64) *nats.Msg {
		m := nats.NewMsg(wire.ProduceSubject("t"))
		m.Header[wire.HeaderKey] = []string{wire.EncodeKey([]byte("alice"))}
		m.Header[wire.HeaderProducer] = []string{producer}
		m.Header[wire.HeaderSeq] = []string{strconv.FormatUint(seq, 10)}
		m.Header[wire.HeaderToken] = []string{tok32}
		m.Data = []byte("v" + strconv.FormatUint(seq, 10))
		return m
	}

	// A record that is not stuck: a plain reply, no error.
	r := request(single(1))
	if r.Header.Get(wire.HeaderError) != "" {
		t.Fatalf("record 1: error reply %s", r.Data)
	}
	// The stuck one: an error reply (§3) with the header, the broker's id and the detail.
	r = request(single(2))
	if got := r.Header.Get(wire.HeaderError); got != "unavailable" {
		t.Fatalf("record 2: %s header %q, want unavailable (body %s)", wire.HeaderError, got, r.Data)
	}
	if r.Header.Get(wire.HeaderBroker) == "" {
		t.Fatalf("record 2: no %s header", wire.HeaderBroker)
	}
	var body map[string]any
	if err := json.Unmarshal(r.Data, &body); err != nil {
		t.Fatalf("record 2: body %q: %v", r.Data, err)
	}
	checkErr("single reply", body, 2)
	if msg := body["message"].(string); !strings.Contains(msg, "read partition") {
		t.Fatalf("record 2: message %q does not say to read the partition", msg)
	}

	// A batched request (§5.2): records 3, 4 (stuck) and 5; only record 4's result is the error.
	key := "alice"
	m := nats.NewMsg(wire.ProduceSubject("t"))
	m.Header[wire.HeaderProducer] = []string{producer}
	m.Header[wire.HeaderBatch] = []string{"3"}
	m.Data = bytes.Join([][]byte{batchRec(3, tok32, &key, []byte("v3")), batchRec(4, tok32, &key, []byte("v4")), batchRec(5, tok32, &key, []byte("v5"))}, nil)
	r = request(m)
	if r.Header.Get(wire.HeaderError) != "" {
		t.Fatalf("batch: request-level error %s", r.Data)
	}
	var rep struct {
		Results []map[string]any `json:"results"`
		Broker  string           `json:"broker"`
	}
	if err := json.Unmarshal(r.Data, &rep); err != nil || len(rep.Results) != 3 {
		t.Fatalf("batch: reply %s (%v): want 3 results", r.Data, err)
	}
	for i, res := range rep.Results {
		seq := uint64(3 + i)
		e, isErr := res["error"].(map[string]any)
		if isErr != stuck[seq] {
			t.Fatalf("batch record %d: result %v; want an error only for the stuck record 4", seq, res)
		}
		if isErr {
			checkErr("batched result", e, seq)
		}
	}
}

// tok32 is a valid Pctl-Token (spec/protocol.md §5.2: 32 lowercase hex digits).
const tok32 = "00112233445566778899aabbccddeeff"
