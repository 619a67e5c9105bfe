package broker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// batchRec writes one record of a batched produce request in the layout of spec/protocol.md
// §5.2's table, by hand (not with wire.AppendBatchRecord).
func batchRec(seq uint64, token string, key *string, value []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, seq)
	b = append(b, byte(len(token)))
	b = append(b, token...)
	if key == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(*key)))
		b = append(b, *key...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	return append(b, value...)
}

// contentToken is spec/protocol.md §5.2's token of a record sent without one, computed here from
// the spec's words.
func contentToken(key *string, value []byte) string {
	h := sha256.New()
	h.Write([]byte("pctl-record-v1"))
	h.Write([]byte{0})
	if key == nil {
		h.Write([]byte("n"))
	} else {
		h.Write([]byte("k"))
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(*key))))
		h.Write([]byte(*key))
	}
	h.Write(value)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// storedBySeq reads every record of the topic's partition streams, by Pctl-Seq.
func storedBySeq(t *testing.T, admin *client.Client, topic string, partitions int) map[string]*nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]*nats.Msg{}
	for q := 0; q < partitions; q++ {
		s, err := admin.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		for seq := s.CachedInfo().State.FirstSeq; seq > 0 && seq <= s.CachedInfo().State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				t.Fatal(err)
			}
			nm := &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}
			nm.Header.Set("Partition", strconv.Itoa(q))
			out[m.Header.Get(wire.HeaderProducer)+"/"+m.Header.Get(wire.HeaderSeq)] = nm
		}
	}
	return out
}

// TestProduceBatchedRequests sends batched produce requests by hand (spec/protocol.md §5.2):
// a good batch is stored record by record with each record's identity, token and key, and
// answered with one result per record in body order; a request that breaks the layout or the
// rules is refused as a whole with nothing of it stored; one record the stream refuses fails
// alone; and the sequence check applies to the batch's last record.
func TestProduceBatchedRequests(t *testing.T) {
	b := startBroker(t, "")
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := connect(t, b, broker.RoleAdmin)
	const partitions = 4
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: partitions, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	nc := connect(t, b, broker.RoleProducer).Conn()
	request := func(subject string, hdr nats.Header, body []byte) *nats.Msg {
		t.Helper()
		m := &nats.Msg{Subject: subject, Header: hdr, Data: body}
		r, err := nc.RequestMsg(m, 20*time.Second)
		if err != nil {
			t.Fatalf("request to %s: %v", subject, err)
		}
		return r
	}
	str := func(s string) *string { return &s }
	tok := "0123456789abcdef0123456789abcdef"

	// A good batch of three records: keyed with a token, keyless without one, the empty key.
	body := bytes.Join([][]byte{
		batchRec(3, tok, str("alice"), []byte("v1")),
		batchRec(4, "", nil, []byte("keyless")),
		batchRec(9, "", str(""), []byte("")),
	}, nil)
	r := request(wire.ProduceSubject("t"), nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"3"}}, body)
	if code := r.Header.Get(wire.HeaderError); code != "" {
		t.Fatalf("good batch refused: %s %s", code, r.Data)
	}
	var rep wire.ProduceBatchReply
	if err := json.Unmarshal(r.Data, &rep); err != nil {
		t.Fatalf("reply %q: %v", r.Data, err)
	}
	brokerID := r.Header.Get(wire.HeaderBroker)
	if len(rep.Results) != 3 || rep.Broker != brokerID || brokerID == "" {
		t.Fatalf("reply %s (header %s=%q): want 3 results and the broker's id", r.Data, wire.HeaderBroker, brokerID)
	}
	stored := storedBySeq(t, admin, "t", partitions)
	if len(stored) != 3 {
		t.Fatalf("%d records stored, want 3", len(stored))
	}
	for i, w := range []struct {
		seq   string
		token string
		key   *string
		value string
	}{{"3", tok, str("alice"), "v1"}, {"4", contentToken(nil, []byte("keyless")), nil, "keyless"}, {"9", contentToken(str(""), nil), str(""), ""}} {
		m := stored["batcher/"+w.seq]
		if m == nil {
			t.Fatalf("record with Pctl-Seq %s not stored", w.seq)
		}
		res := rep.Results[i]
		if res.Error != nil || strconv.Itoa(res.Partition) != m.Header.Get("Partition") || res.Epoch != 1 {
			t.Fatalf("result %d %+v; the record is stored in partition %s", i, res, m.Header.Get("Partition"))
		}
		if got, want := m.Header.Get(wire.HeaderMsgID), "batcher-"+w.seq+"-"+w.token; got != want {
			t.Errorf("record %s: %s %q, want %q", w.seq, wire.HeaderMsgID, got, want)
		}
		keyHdr, hasKey := m.Header[wire.HeaderKey]
		switch {
		case w.key == nil && hasKey:
			t.Errorf("keyless record %s stored with %s %v", w.seq, wire.HeaderKey, keyHdr)
		case w.key != nil && (len(keyHdr) != 1 || keyHdr[0] != wire.EncodeKey([]byte(*w.key))):
			t.Errorf("record %s: %s %v, want %q", w.seq, wire.HeaderKey, keyHdr, wire.EncodeKey([]byte(*w.key)))
		}
		if string(m.Data) != w.value {
			t.Errorf("record %s: value %q, want %q", w.seq, m.Data, w.value)
		}
	}

	// The sequence check concerns the batch's last record: a request pipelined to this broker
	// after it names 9 as what came before and is accepted; one naming 11 (never accepted: the
	// request before it never arrived) is refused, as is an unknown producer.
	own := wire.ProduceBrokerSubject("t", brokerID)
	one := batchRec(10, "", str("bob"), []byte("after"))
	if r := request(own, nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"1"}, wire.HeaderPrev: {"9"}}, one); r.Header.Get(wire.HeaderError) != "" {
		t.Fatalf("batch after the first, Pctl-Prev 9: refused %s", r.Data)
	}
	if r := request(own, nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"1"}, wire.HeaderPrev: {"11"}}, batchRec(12, "", nil, []byte("x"))); r.Header.Get(wire.HeaderError) != "out_of_sequence" {
		t.Fatalf("Pctl-Prev 11, never accepted: got %q %s, want out_of_sequence", r.Header.Get(wire.HeaderError), r.Data)
	}
	if r := request(own, nats.Header{wire.HeaderProducer: {"stranger"}, wire.HeaderBatch: {"1"}, wire.HeaderPrev: {"1"}}, batchRec(2, "", nil, []byte("x"))); r.Header.Get(wire.HeaderError) != "out_of_sequence" {
		t.Fatalf("unknown producer on the broker's own subject: got %q %s, want out_of_sequence", r.Header.Get(wire.HeaderError), r.Data)
	}
	before := len(storedBySeq(t, admin, "t", partitions))

	// Refused as a whole, nothing stored.
	two := append(batchRec(20, "", str("k"), []byte("a")), batchRec(21, "", str("k"), []byte("b"))...)
	refusals := []struct {
		name string
		hdr  nats.Header
		body []byte
		says string
	}{
		{"count above the body's records", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"3"}}, two, "ends after 2 records"},
		{"count below the body's records", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"1"}}, two, "bytes after the last"},
		{"count zero", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"0"}}, two, "1 to 4096"},
		{"no producer", nats.Header{wire.HeaderBatch: {"2"}}, two, wire.HeaderProducer},
		{"a Pctl-Seq header", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}, wire.HeaderSeq: {"20"}}, two, "not in a Pctl-Seq header"},
		{"a Pctl-Key header", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}, wire.HeaderKey: {"b64:"}}, two, "not in a Pctl-Key header"},
		{"a Pctl-Token header", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}, wire.HeaderToken: {tok}}, two, "not in a Pctl-Token header"},
		{"a Pctl-Tombstone header", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}, wire.HeaderTombstone: {"true"}}, two, "not in a Pctl-Tombstone header"},
		{"sequences not increasing", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}}, append(batchRec(21, "", nil, []byte("a")), batchRec(20, "", nil, []byte("b"))...), "does not follow"},
		{"a bad token in the second record", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}}, append(batchRec(20, "", nil, []byte("a")), batchRec(21, "0123456789abcdef!", nil, []byte("b"))...), "record 2 of 2"},
		{"Pctl-Prev not below the first record", nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"2"}, wire.HeaderPrev: {"20"}}, two, "below the batch's first"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			r := request(wire.ProduceSubject("t"), tc.hdr, tc.body)
			if code := r.Header.Get(wire.HeaderError); code != "bad_request" || !strings.Contains(string(r.Data), tc.says) {
				t.Fatalf("got %q %s; want bad_request saying %q", code, r.Data, tc.says)
			}
			if r.Header.Get(wire.HeaderBroker) == "" {
				t.Errorf("error reply without %s", wire.HeaderBroker)
			}
		})
	}
	if n := len(storedBySeq(t, admin, "t", partitions)); n != before {
		t.Fatalf("refused requests stored %d records", n-before)
	}

	// One record too large for the partition stream (1 MiB) fails alone, with the stream's
	// refusal; the records around it are stored.
	big := bytes.Repeat([]byte("x"), 1<<20+1)
	body = bytes.Join([][]byte{
		batchRec(30, "", str("k"), []byte("before")),
		batchRec(31, "", str("k"), big),
		batchRec(32, "", str("k"), []byte("after")),
	}, nil)
	r = request(wire.ProduceSubject("t"), nats.Header{wire.HeaderProducer: {"batcher"}, wire.HeaderBatch: {"3"}}, body)
	rep = wire.ProduceBatchReply{}
	if err := json.Unmarshal(r.Data, &rep); err != nil || len(rep.Results) != 3 {
		t.Fatalf("reply %.300s: %v", r.Data, err)
	}
	if e := rep.Results[1].Error; e == nil || e.Code != "bad_request" || rep.Results[0].Error != nil || rep.Results[2].Error != nil {
		t.Fatalf("results %+v %+v %+v: want only the middle one refused (bad_request)", rep.Results[0], rep.Results[1], rep.Results[2])
	}
	// Refused for its size, and the reply says so by its detail (spec/protocol.md §3), not words.
	if re := rep.Results[1].Error.Remote(); !errors.Is(re, wire.ErrRecordTooLarge) || !errors.Is(re, wire.ErrBadRequest) {
		t.Fatalf("the too-large record's error %+v (detail %s): want the too_large detail (wire.ErrRecordTooLarge)", rep.Results[1].Error, re.Detail)
	}
	stored = storedBySeq(t, admin, "t", partitions)
	if stored["batcher/30"] == nil || stored["batcher/32"] == nil || stored["batcher/31"] != nil {
		t.Fatalf("stored 30: %v, 31: %v, 32: %v; want 30 and 32 only", stored["batcher/30"] != nil, stored["batcher/31"] != nil, stored["batcher/32"] != nil)
	}
}
