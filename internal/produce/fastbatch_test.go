package produce

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

func TestFBSubjectRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		batch string
		flow  int
		seq   uint64
		op    int
		want  string
	}{
		{"start", "b1", 256, 1, fbStart, "_INBOX.x.b1.256.fail.1.0.$FI"},
		{"append", "0123456789abcdef0123456789abcdef", 1, 99, fbAppend, "_INBOX.x.0123456789abcdef0123456789abcdef.1.fail.99.1.$FI"},
		{"eob", "b", 4, 18446744073709551614, fbEOB, "_INBOX.x.b.4.fail.18446744073709551614.3.$FI"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := fbReplySubject("_INBOX.x", tc.batch, tc.flow, tc.seq, tc.op)
			if got != tc.want {
				t.Fatalf("subject %q, want %q (the server's format, spec/protocol.md §5.1.1)", got, tc.want)
			}
			b, seq, op, ok := parseFBSubject("_INBOX.x", got)
			if !ok || b != tc.batch || seq != tc.seq || op != tc.op {
				t.Fatalf("parsed %q %d %d %v", b, seq, op, ok)
			}
		})
	}
	for _, bad := range []string{"_INBOX.y.b.1.fail.1.0.$FI", "_INBOX.x.b.1.ok.1.0.$FI", "_INBOX.x.b.1.fail.x.0.$FI", "_INBOX.x.b.1.fail.1.0", "_INBOX.x.b.fail.1.0.$FI"} {
		if _, _, _, ok := parseFBSubject("_INBOX.x", bad); ok {
			t.Errorf("%q parsed as a reply of ours", bad)
		}
	}
}

// TestParseFBReply: the bodies are what nats-server 2.15.2 sent in the experiments that
// testServer starts a real embedded nats-server with JetStream on a temporary directory and
// connects to it; both end with the test.
func testServer(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestServerFastBatchContract repeats.
func TestParseFBReply(t *testing.T) {
	tests := []struct {
		name string
		body string
		hdr  nats.Header
		want fbReply
	}{
		{"flow ack", `{"type":"ack","seq":3,"msgs":4}`, nil, fbReply{kind: replyFlowAck, ackSeq: 3}},
		{"gap", `{"type":"gap","last_seq":3,"seq":4}`, nil, fbReply{kind: replyGap, gapExpected: 3, gapGot: 4}},
		{"flow error", `{"type":"err","seq":2,"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`, nil,
			fbReply{kind: replyFlowErr, gapGot: 2, errCode: 10054, errText: "message size exceeds maximum allowed"}},
		{"pub ack", `{"stream":"S","seq":5,"batch":"b1","count":5}`, nil, fbReply{kind: replyPubAck, stream: "S", streamSeq: 5, ackBatch: "b1", count: 5}},
		{"duplicate", `{"stream":"S","seq":14,"duplicate": true,"batch":"b11","count":1}`, nil, fbReply{kind: replyPubAck, stream: "S", streamSeq: 14, ackBatch: "b11", count: 1, duplicate: true}},
		{"refusal", `{"error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"},"stream":"S","seq":0}`, nil,
			fbReply{kind: replyRefusal, stream: "S", errCode: 10208, errText: "batch publish ID unknown"}},
		{"no responders", ``, nats.Header{"Status": []string{"503"}}, fbReply{kind: replyNoResponders}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseFBReply(&nats.Msg{Data: []byte(tc.body), Header: tc.hdr}, "", 0, 0)
			if got != tc.want {
				t.Fatalf("parsed %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{`not json`, `{}`, `{"type":"what"}`} {
		if got := parseFBReply(&nats.Msg{Data: []byte(bad)}, "", 0, 0); got.kind != replyGarbage {
			t.Errorf("%q parsed as %v", bad, got.kind)
		}
	}
}

// TestRecordToken: vectors computed independently with Python's hashlib (spec/protocol.md §5.2).
func TestRecordToken(t *testing.T) {
	tests := []struct {
		name  string
		key   []byte
		noKey bool
		value []byte
		want  string
	}{
		{"keyed", []byte("alice"), false, []byte("v1"), "59359d5a354d7ce89a22137b6ee2cafa"},
		{"empty key, empty value", []byte{}, false, nil, "c217003a22d014711908da001aa75cbb"},
		{"keyless", nil, true, nil, "f629b1a44f92f94b00c943fcffdfb307"},
		{"binary key", []byte{0, 0xff}, false, []byte("hello world"), "e979e3cda73cd2ba8b5c0d37802e8a7c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RecordToken(tc.key, tc.noKey, tc.value); got != tc.want {
				t.Fatalf("token %s, want %s: thin clients' retries would no longer deduplicate across broker versions", got, tc.want)
			}
		})
	}
	if a, b := NewToken(), NewToken(); a == b || len(a) != 32 || !wire.ValidToken(a) {
		t.Fatalf("random tokens %q %q", a, b)
	}
	for _, bad := range []string{"short", strings.Repeat("a", 65), "has.dot.in.it.xxxxxxx", "space in token xxxxx"} {
		if wire.ValidToken(bad) {
			t.Errorf("wire.ValidToken(%q) = true", bad)
		}
	}
}

// TestServerFastBatchContract pins the nats-server behaviour the producer's protocol rests on
// (spec/protocol.md §5.1.1), against a real embedded server: an upgrade that changes any of it
// fails here first.
func TestServerFastBatchContract(t *testing.T) {
	nc, js := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"d.s"}, AllowBatchPublish: true, Duplicates: time.Minute, MaxMsgSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if lvl := st.CachedInfo().Config.Metadata["_nats.level"]; lvl < "4" {
		t.Fatalf("server API level %q: fast batches need 4", lvl)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "N", Subjects: []string{"d.n"}}); err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, 256)
	if _, err := nc.ChanSubscribe(inbox+".>", ch); err != nil {
		t.Fatal(err)
	}
	pub := func(subject, batch string, seq uint64, op int, msgID, data string) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Reply: fbReplySubject(inbox, batch, 100, seq, op), Data: []byte(data), Header: nats.Header{}}
		if msgID != "" {
			m.Header.Set(wire.HeaderMsgID, msgID)
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	// next returns the next reply that is not a flow ack (flow acks may come at any time).
	var acks []uint64
	next := func(what string) fbReply {
		t.Helper()
		for {
			select {
			case m := <-ch:
				b, seq, op, ok := parseFBSubject(inbox, m.Subject)
				if !ok {
					t.Fatalf("%s: reply on %q", what, m.Subject)
				}
				r := parseFBReply(m, b, seq, op)
				if r.kind == replyFlowAck {
					acks = append(acks, r.ackSeq)
					continue
				}
				return r
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: no reply", what)
			}
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case m := <-ch:
			if r := parseFBReply(m, "", 0, 0); r.kind != replyFlowAck {
				t.Fatalf("%s: unexpected reply %s", what, m.Data)
			}
		case <-time.After(200 * time.Millisecond):
		}
	}

	// A clean batch: start, appends, EOB. The PubAck counts the records and names the last one.
	for i := 1; i <= 5; i++ {
		op := fbAppend
		if i == 1 {
			op = fbStart
		}
		pub("d.s", "clean", uint64(i), op, fmt.Sprint("m", i), "x")
	}
	pub("d.s", "clean", 6, fbEOB, "", "")
	if r := next("clean"); r.kind != replyPubAck || r.count != 5 || r.streamSeq != 5 || r.ackBatch != "clean" {
		t.Fatalf("clean batch: %+v", r)
	}
	if len(acks) == 0 || acks[0] != 0 {
		t.Fatalf("the first message's flow ack says seq 0: got %v", acks)
	}

	// A forward gap (a message lost) ends the batch; the PubAck counts the stored prefix; later
	// messages of the batch are refused as unknown.
	pub("d.s", "fwd", 1, fbStart, "g1", "x")
	pub("d.s", "fwd", 2, fbAppend, "g2", "x")
	pub("d.s", "fwd", 4, fbAppend, "g4", "x")
	if r := next("forward gap"); r.kind != replyGap || r.gapExpected != 3 || r.gapGot != 4 {
		t.Fatalf("forward gap: %+v", r)
	}
	if r := next("forward gap PubAck"); r.kind != replyPubAck || r.count != 2 || r.streamSeq != 7 {
		t.Fatalf("forward gap PubAck: %+v", r)
	}
	pub("d.s", "fwd", 5, fbAppend, "g5", "x")
	if r := next("after the gap"); r.kind != replyRefusal || r.errCode != errCodeUnknownBatch {
		t.Fatalf("after the gap: %+v", r)
	}

	// A backward gap (a batch seq seen twice) ends the batch too.
	pub("d.s", "back", 1, fbStart, "k1", "x")
	pub("d.s", "back", 2, fbAppend, "k2", "x")
	pub("d.s", "back", 2, fbAppend, "k2b", "x")
	if r := next("backward gap"); r.kind != replyGap || r.gapGot != 2 {
		t.Fatalf("backward gap: %+v", r)
	}
	if r := next("backward gap PubAck"); r.kind != replyPubAck || r.count != 2 || r.streamSeq != 9 {
		t.Fatalf("backward gap PubAck: %+v", r)
	}

	// A duplicate inside a batch is skipped silently and counted as persisted.
	pub("d.s", "dup", 1, fbStart, "m7", "x")
	pub("d.s", "dup", 2, fbAppend, "m4", "x") // stored at 4 already
	pub("d.s", "dup", 3, fbAppend, "m8", "x")
	pub("d.s", "dup", 4, fbEOB, "", "")
	if r := next("duplicate inside"); r.kind != replyPubAck || r.count != 3 || r.streamSeq != 11 || r.duplicate {
		t.Fatalf("duplicate inside a batch: %+v", r)
	}
	// A one-message batch that is a duplicate gets a duplicate PubAck naming the original.
	pub("d.s", "single", 1, fbCommit, "m2", "x")
	if r := next("single duplicate"); r.kind != replyPubAck || !r.duplicate || r.streamSeq != 2 || r.count != 1 {
		t.Fatalf("one-message duplicate: %+v", r)
	}

	// A record over the stream's maximum size is refused before the batch checks: the next
	// message finds a gap.
	pub("d.s", "big", 1, fbStart, "b1", "x")
	pub("d.s", "big", 2, fbAppend, "b2", strings.Repeat("x", 200))
	if r := next("too large"); r.kind != replyRefusal || r.errCode != errCodeTooLarge || r.seq != 2 {
		t.Fatalf("too large: %+v", r)
	}
	pub("d.s", "big", 3, fbAppend, "b3", "x")
	if r := next("after too large"); r.kind != replyGap {
		t.Fatalf("after too large: %+v", r)
	}
	if r := next("after too large PubAck"); r.kind != replyPubAck || r.count != 1 {
		t.Fatalf("after too large PubAck: %+v", r)
	}

	// A stream without allow_batched refuses; a subject without a stream answers no responders.
	pub("d.n", "off", 1, fbStart, "", "x")
	if r := next("disabled"); r.kind != replyRefusal || r.errCode != errCodeBatchDisabled {
		t.Fatalf("batching disabled: %+v", r)
	}
	pub("d.none", "none", 1, fbStart, "", "x")
	if r := next("no stream"); r.kind != replyNoResponders {
		t.Fatalf("no stream: %+v", r)
	}

	// A fence: the stream moves to another subject with a batch open. Publishes to the old
	// subject answer no responders; the batch lives on, and an EOB on the new subject closes it
	// with the count of what was stored.
	pub("d.s", "fence", 1, fbStart, "f1", "x")
	pub("d.s", "fence", 2, fbAppend, "f2", "x")
	quiet("fence")
	if _, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"d.s2"}, AllowBatchPublish: true, Duplicates: time.Minute, MaxMsgSize: 100}); err != nil {
		t.Fatal(err)
	}
	pub("d.s", "fence", 3, fbAppend, "f3", "x")
	if r := next("fenced"); r.kind != replyNoResponders {
		t.Fatalf("publish to the old subject: %+v", r)
	}
	pub("d.s2", "fence", 3, fbEOB, "", "")
	if r := next("EOB on the new subject"); r.kind != replyPubAck || r.count != 2 || r.ackBatch != "fence" {
		t.Fatalf("EOB on the new subject: %+v", r)
	}
	last, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := last.CachedInfo().State.Msgs; n != 14 {
		t.Fatalf("the stream holds %d messages, want 14 (EOB commits are not stored)", n)
	}
}

// TestSetIdentity: a record's protocol headers as spec/protocol.md §5.1 step 3 writes them: the
// key (absent for a keyless record), producer id, sequence, and the deduplication id
// "<producer>-<seq>-<token>".
func TestSetIdentity(t *testing.T) {
	h := nats.Header{}
	SetIdentity(h, []byte("k"), false, "prod-1", 42, "0123456789abcdef0123456789abcdef")
	want := nats.Header{wire.HeaderKey: {"b64:aw=="}, wire.HeaderProducer: {"prod-1"}, wire.HeaderSeq: {"42"},
		wire.HeaderMsgID: {"prod-1-42-0123456789abcdef0123456789abcdef"}}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("headers %v, want %v", h, want)
	}
	h = nats.Header{}
	SetIdentity(h, nil, true, "p", 1, "tok")
	if _, ok := h[wire.HeaderKey]; ok || h.Get(wire.HeaderMsgID) != "p-1-tok" {
		t.Fatalf("keyless record's headers %v", h)
	}
}
