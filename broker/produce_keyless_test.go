package broker_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// keylessWant is the partition of spec/protocol.md §5.2 ("Keyless records of the produce
// service"), computed here from the spec's words.
func keylessWant(producer string, seq uint64, token string, partitions int) int {
	h := sha256.New()
	h.Write([]byte("pctl-keyless-v1"))
	h.Write([]byte{0})
	h.Write([]byte(producer + "-" + strconv.FormatUint(seq, 10) + "-" + token))
	return int(binary.BigEndian.Uint64(h.Sum(nil)[:8]) % uint64(partitions))
}

// TestKeylessRetriesAreStoredOnce retries keyless thin requests as a thin client does when an
// answer is lost (same producer, sequence and token): each record must be stored once, in the
// partition the spec names. Round-robin placement (the old broker) stored every retry again in
// the next partition, beyond the reach of deduplication (TestHundredThousandRecords saw such
// duplicates under load, with no crash injected).
func TestKeylessRetriesAreStoredOnce(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	const partitions = 5
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, b, broker.RoleProducer).Conn()
	tokens := []string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210", "00000000000000000000000000000001"}
	want := map[int]int{}
	for i, tok := range tokens {
		seq := uint64(i + 1)
		p := keylessWant("thin-1", seq, tok, partitions)
		want[p]++
		for try := 0; try < 3; try++ {
			m := &nats.Msg{Subject: wire.ProduceSubject("t"), Data: []byte("v" + strconv.Itoa(i)), Header: nats.Header{
				wire.HeaderProducer: {"thin-1"}, wire.HeaderSeq: {strconv.FormatUint(seq, 10)}, wire.HeaderToken: {tok},
			}}
			r, err := nc.RequestMsg(m, 20*time.Second)
			if err != nil {
				t.Fatalf("record %d try %d: %v", seq, try, err)
			}
			if code := r.Header.Get(wire.HeaderError); code != "" {
				t.Fatalf("record %d try %d refused: %s %s", seq, try, code, r.Data)
			}
			var rep struct{ Partition int }
			if err := json.Unmarshal(r.Data, &rep); err != nil {
				t.Fatalf("reply %q: %v", r.Data, err)
			}
			if rep.Partition != p {
				t.Errorf("record %d try %d: stored in partition %d, the spec's formula gives %d", seq, try, rep.Partition, p)
			}
		}
	}
	total := 0
	for q := 0; q < partitions; q++ {
		s, err := admin.JetStream().Stream(ctx, wire.StreamName("t", q))
		if err != nil {
			t.Fatal(err)
		}
		n := int(s.CachedInfo().State.Msgs)
		total += n
		if n != want[q] {
			t.Errorf("partition %d holds %d records, want %d", q, n, want[q])
		}
	}
	if total != len(tokens) {
		t.Errorf("%d records stored for %d records retried 3 times each: retries were stored again", total, len(tokens))
	}
}
