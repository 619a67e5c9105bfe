package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// stored counts the records in a topic's partition streams.
func stored(t *testing.T, b *broker.Broker, topic string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for q := 0; q < desc.MaxPartitions(); q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		n += s.CachedInfo().State.Msgs
	}
	return n
}

// consumed parses `pctl consume --format jsonl` output.
func consumed(t *testing.T, out string) []jsonRecord {
	t.Helper()
	var recs []jsonRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var r jsonRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("consume --format jsonl printed %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestProduceConsumeRoundTrip(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	prod := cliFor(t, b, broker.RoleProducer)
	cons := cliFor(t, b, broker.RoleConsumer)

	var in strings.Builder
	const keys, perKey = 10, 20
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			fmt.Fprintf(&in, "key-%d\t%d\n", k, i)
		}
	}
	in.WriteString("no tab: keyless\n")
	in.WriteString("\tthe empty key\n")
	in.WriteString("tabs\tin\tthe value") // the last line has no newline
	total := keys*perKey + 3

	for _, mode := range []struct{ name, flag string }{{"client-side", ""}, {"broker-side", "--broker-side"}} {
		t.Run(mode.name, func(t *testing.T) {
			topic := "rt-" + strings.Split(mode.name, "-")[0]
			expect(t, admin.run("", "topic", "create", topic, "--partitions", "4", "--partitioner", "kafka-murmur2"), exitOK)
			args := []string{"produce", topic}
			if mode.flag != "" {
				args = append(args, mode.flag)
			}
			r := prod.run(in.String(), args...)
			expect(t, r, exitOK, fmt.Sprintf("%d records, %d acknowledged, 0 failed, 1 keyless", total, total), "partitions used", "epochs 1", "records/s")

			r = cons.run("", "consume", topic, "--group", "g", "--from-beginning", "--format", "jsonl", "--idle-exit", "700ms")
			expect(t, r, exitOK, fmt.Sprintf("%d records", total))
			recs := consumed(t, r.stdout)
			if len(recs) != total {
				t.Fatalf("consumed %d records, want %d", len(recs), total)
			}
			last := map[string]int{}
			var sawKeyless, sawEmpty, sawTabs bool
			for _, rec := range recs {
				if rec.Topic != topic || rec.Epoch != 1 || rec.Seq == 0 || rec.Value == nil {
					t.Fatalf("bad record %+v", rec)
				}
				switch {
				case rec.Key == nil:
					sawKeyless = *rec.Value == "no tab: keyless"
				case *rec.Key == "":
					sawEmpty = *rec.Value == "the empty key"
				case *rec.Key == "tabs":
					sawTabs = *rec.Value == "in\tthe value"
				default:
					var v int
					fmt.Sscan(*rec.Value, &v)
					if prev, ok := last[*rec.Key]; ok && v != prev+1 {
						t.Fatalf("key %s: %d after %d: per-key order broken or records lost", *rec.Key, v, prev)
					}
					last[*rec.Key] = v
				}
			}
			if !sawKeyless || !sawEmpty || !sawTabs || len(last) != keys {
				t.Fatalf("keyless %v, empty key %v, tabs in value %v, %d keys: %s", sawKeyless, sawEmpty, sawTabs, len(last), r.stdout)
			}
			// The group committed on exit: nothing new for it.
			r = cons.run("", "consume", topic, "--group", "g", "--idle-exit", "200ms")
			expect(t, r, exitOK, "0 records")
		})
	}
}

func TestProduceHexAndBinary(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "bin", "--partitions", "1", "--partitioner", "jump"), exitOK)
	// key 00 ff, value c3 28 (not UTF-8); the empty key with the value "-"; a keyless "hex:" value.
	r := cliFor(t, b, broker.RoleProducer).run("00ff\tc328\n\t2d\n6865783a31\n", "produce", "bin", "--hex", "--producer-id", "p1")
	expect(t, r, exitOK, "3 records, 3 acknowledged")
	cons := cliFor(t, b, broker.RoleConsumer)
	r = cons.run("", "consume", "bin", "--group", "text", "--from-beginning", "--max", "3")
	expect(t, r, exitOK)
	want := "0\t1\t1\thex:00ff\thex:c328\n0\t1\t2\t\t-\n0\t1\t3\t-\thex:6865783a31\n"
	if r.stdout != want {
		t.Fatalf("text output:\n%q\nwant\n%q", r.stdout, want)
	}
	r = cons.run("", "consume", "bin", "--group", "json", "--from-beginning", "--max", "3", "--format", "jsonl")
	expect(t, r, exitOK)
	want = `{"topic":"bin","partition":0,"epoch":1,"seq":1,"key_b64":"AP8=","value_b64":"wyg=","producer":"p1","pseq":1}
{"topic":"bin","partition":0,"epoch":1,"seq":2,"key":"","value":"-","producer":"p1","pseq":2}
{"topic":"bin","partition":0,"epoch":1,"seq":3,"value":"hex:1","producer":"p1","pseq":3}
`
	if r.stdout != want {
		t.Fatalf("jsonl output:\n%s\nwant\n%s", r.stdout, want)
	}
}

func TestProduceMalformedLine(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	tests := []struct {
		name, topic, in string
		args            []string
		want            []string
		stored          uint64
	}{
		{"bad hex key", "t", "61\t31\n62\t32\nzz\t33\n63\t34\n", []string{"--hex"}, []string{"line 3: key is not hex", "nothing from this line on was sent", "2 records, 2 acknowledged"}, 2},
		{"bad hex value", "t", "61\t3\n", []string{"--hex"}, []string{"line 1: value is not hex"}, 2},
		{"key too long", "t", "ok\t1\n" + strings.Repeat("k", 65537) + "\tv\n", nil, []string{"line 2: key of 65537 bytes"}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := prod.run(tc.in, append([]string{"produce", tc.topic}, tc.args...)...)
			expect(t, r, exitUsage, tc.want...)
			if n := stored(t, b, tc.topic); n != tc.stored {
				t.Fatalf("%d records stored, want %d (the lines before the bad one, and nothing after)", n, tc.stored)
			}
		})
	}
}

func TestProduceOversized(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	in := "small\t1\nbig\t" + strings.Repeat("x", 1<<20+1) + "\nsmall\t2\n"
	for i, mode := range [][]string{nil, {"--broker-side"}} {
		r := prod.run(in, append([]string{"produce", "t"}, mode...)...)
		expect(t, r, exitFailure, "line 2: refused by the broker: the record (key, value and headers) is larger than its max record size",
			"the broker's max record size is 1048576 bytes", "3 records, 2 acknowledged, 1 failed", "1 of 3 records failed")
		if n := stored(t, b, "t"); n != uint64(2*(i+1)) {
			t.Fatalf("%v: %d records stored, want %d", mode, n, 2*(i+1))
		}
	}
	// Larger than the server's max_payload: refused before it is sent.
	huge := "huge\t" + strings.Repeat("x", 17<<20) + "\n"
	for _, mode := range [][]string{nil, {"--broker-side"}} {
		r := prod.run(huge, append([]string{"produce", "t"}, mode...)...)
		expect(t, r, exitFailure, "line 1:", "larger than the server's max_payload of 16777216 bytes")
	}
}

func TestProduceErrors(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	cons := cliFor(t, b, broker.RoleConsumer)
	tests := []struct {
		name string
		p    *pctlAs
		args []string
		code int
		want string
	}{
		{"unknown topic", prod, []string{"produce", "nope"}, exitUsage, `topic "nope" does not exist`},
		{"unknown topic broker-side", prod, []string{"produce", "nope", "--broker-side"}, exitUsage, `topic "nope" does not exist`},
		{"bad topic name", prod, []string{"produce", "a b"}, exitUsage, "a topic name is"},
		{"bad producer id", prod, []string{"produce", "t", "--producer-id", "a.b"}, exitUsage, "--producer-id"},
		{"consumer may not produce", cons, []string{"produce", "t"}, exitFailure, "producing needs the producer or admin role"},
		{"consumer may not produce broker-side", cons, []string{"produce", "t", "--broker-side"}, exitFailure, "producing needs the producer or admin role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.p.run("k\tv\nk\tw\n", tc.args...)
			expect(t, r, tc.code, tc.want)
			if strings.Count(r.stderr, tc.want) != 1 {
				t.Errorf("the error should be said once: %s", r)
			}
		})
	}
	if n := stored(t, b, "t"); n != 0 {
		t.Fatalf("%d records stored by refused producers", n)
	}
}

func TestProduceDeduplicatesWithProducerID(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	in := "a\t1\nb\t2\nc\t3\n"
	for i, mode := range [][]string{nil, {"--broker-side"}} {
		id := fmt.Sprintf("loader-%d", i)
		args := append([]string{"produce", "t", "--producer-id", id}, mode...)
		expect(t, prod.run(in, args...), exitOK, "3 acknowledged, 0 failed")
		// Stored again: nothing (the count below). The server reports a duplicate only for a
		// record sent alone, so the summary may count fewer than 3 (spec/protocol.md §5.1.1).
		expect(t, prod.run(in, args...), exitOK, "3 acknowledged")
		if n := stored(t, b, "t"); n != uint64(3*(i+1)) {
			t.Fatalf("%v: %d records stored, want %d", mode, n, 3*(i+1))
		}
	}
}

func TestParseRecord(t *testing.T) {
	tests := []struct {
		name, line string
		hex        bool
		want       client.Record
		err        string
	}{
		{"keyed", "k\tv", false, client.Record{Key: []byte("k"), Value: []byte("v")}, ""},
		{"keyless", "just a value", false, client.Record{Value: []byte("just a value"), NoKey: true}, ""},
		{"empty line is a keyless empty record", "", false, client.Record{Value: []byte{}, NoKey: true}, ""},
		{"empty key", "\tv", false, client.Record{Key: []byte{}, Value: []byte("v")}, ""},
		{"empty value", "k\t", false, client.Record{Key: []byte("k"), Value: []byte{}}, ""},
		{"tabs in the value", "k\ta\tb", false, client.Record{Key: []byte("k"), Value: []byte("a\tb")}, ""},
		{"carriage return is data", "k\tv\r", false, client.Record{Key: []byte("k"), Value: []byte("v\r")}, ""},
		{"hex", "00ff\t0a", true, client.Record{Key: []byte{0, 0xff}, Value: []byte{'\n'}}, ""},
		{"hex keyless", "0a0b", true, client.Record{Value: []byte{10, 11}, NoKey: true}, ""},
		{"hex empty key", "\t41", true, client.Record{Key: []byte{}, Value: []byte("A")}, ""},
		{"bad hex key", "0g\t00", true, client.Record{}, "key is not hex"},
		{"odd hex value", "00\t0", true, client.Record{}, "value is not hex"},
		{"key too long", strings.Repeat("k", 65537) + "\tv", false, client.Record{}, "key of 65537 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRecord([]byte(tc.line), tc.hex)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.NoKey != tc.want.NoKey || string(got.Key) != string(tc.want.Key) || string(got.Value) != string(tc.want.Value) ||
				(!got.NoKey && got.Key == nil) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestIntSet(t *testing.T) {
	if got := intSet(map[int]bool{0: true, 1: true, 2: true, 5: true, 7: true, 8: true}); got != "0-2, 5, 7-8 (6)" {
		t.Errorf("intSet: %q", got)
	}
	if got := intSet(nil); got != "none" {
		t.Errorf("intSet(nil): %q", got)
	}
}

// TestProducerRecordOverMaxPayload: a record larger than the server's max_payload can never be
// published; the producer must fail it, and only it, with wire.ErrBadRequest: at Send when its
// key and value alone are too large, else (the headers make it too large) in its Result, while
// the next record with the same key is stored. It once caught the producer re-sending such a
// record forever, so that it never got a Result and Flush never returned.
func TestProducerRecordOverMaxPayload(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "1", "--partitioner", "jump"), exitOK)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleProducer)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, "t", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	max := int(c.Conn().MaxPayload())
	if err := p.Send(ctx, client.Record{Key: []byte("k"), Value: make([]byte, max)}, nil); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("Send of a record over max_payload: %v, want wire.ErrBadRequest", err)
	}
	results := make(chan client.Result, 2)
	done := func(r client.Result) { results <- r }
	// Key and value are exactly max_payload: only the headers push the message over.
	if err := p.Send(ctx, client.Record{Key: []byte("k"), Value: make([]byte, max-1)}, done); err != nil {
		t.Fatalf("Send of a record within max_payload before headers: %v", err)
	}
	if err := p.Send(ctx, client.Record{Key: []byte("k"), Value: []byte("small")}, done); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]client.Result{}
	for len(got) < 2 {
		select {
		case r := <-results:
			got[r.ProducerSeq] = r
		case <-ctx.Done():
			t.Fatalf("results %+v: the record over max_payload has no result: the producer retries a record that can never be sent", got)
		}
	}
	if len(got) != 2 || !errors.Is(got[1].Err, wire.ErrBadRequest) || got[2].Err != nil {
		t.Fatalf("want the record over max_payload refused with wire.ErrBadRequest and the next one stored: %+v", got)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := stored(t, b, "t"); n != 1 {
		t.Fatalf("%d records stored, want the small one only", n)
	}
}

// TestProduceInterrupt: SIGINT while standard input is still open stops reading, waits for the
// answers of what was sent, prints the summary and exits 1.
func TestProduceInterrupt(t *testing.T) {
	b := testBroker(t)
	expect(t, cliFor(t, b, broker.RoleAdmin).run("", "topic", "create", "t", "--partitions", "2", "--partitioner", "jump"), exitOK)
	for _, mode := range [][]string{nil, {"--broker-side"}} {
		before := stored(t, b, "t")
		pr, pw := io.Pipe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan cliResult, 1)
		go func() {
			args := append([]string{"produce", "t", "--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleProducer)}, mode...)
			done <- runCLI(ctx, nil, pr, args...)
		}()
		fmt.Fprint(pw, "a\t1\nb\t2\n")
		deadline := time.Now().Add(30 * time.Second)
		for stored(t, b, "t") < before+2 {
			if time.Now().After(deadline) {
				t.Fatal("the two records were not stored within 30s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		select {
		case r := <-done:
			expect(t, r, exitFailure, "2 records, 2 acknowledged, 0 failed", "interrupted: standard input was not read to the end")
		case <-time.After(20 * time.Second):
			t.Fatal("produce did not stop within 20s of the interrupt")
		}
		pw.Close()
	}
}
