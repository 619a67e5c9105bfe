package crosslang

// Compacted topics in every language (issue 14 item 5): producers in Go (client.Producer, in
// process) and every SDK (sdk/<lang>/produce --tombstone-marker) write many updates per key and
// tombstones into one compacted topic through a grow, a shrink and a function swap (the broker
// backfills at each; its first attempt at the second backfill dies half-way, and the retry loop
// resumes it), while a Go group reads from the beginning. Afterwards:
//
//   - a fresh group reading the current epoch alone, in Go and in every SDK (consume --from
//     current-epoch), delivers exactly one record per key, the key's latest (a tombstoned key:
//     its tombstone, flagged, so that the key is absent from the group's view);
//   - the streams, read back record by record, hold in the current epoch's subjects exactly the
//     latest record of every key in the partition the native partitioner gives it, and after
//     `topic retire` nothing of an older epoch (nothing stale in the old partitions);
//   - the live group lost nothing acknowledged and kept every (producer, key)'s order
//     (client/verify with Compacted), and delivered no backfilled copy of what it had delivered.
//
// Each language writes its own keys (verify knows no order between producers of one key), so a
// key's latest record is its producer's last line for it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/partitioner"
)

const tombstoneMarker = "~TOMBSTONE~"

// compactKeys is how many keys each language writes.
const compactKeys = 60

// compactPhase is one phase's lines of one language: three updates of every key, and a
// tombstone after them for every seventh key (another seventh each phase; a key tombstoned in
// one phase gets values again in the next). Values are padded past 64 KiB a phase (the Python
// produce command reads its input 64 KiB at a time).
func compactPhase(lang string, phase int) []line {
	pad := strings.Repeat("~", 400)
	var out []line
	for u := 0; u < 3; u++ {
		for j := 0; j < compactKeys; j++ {
			k := []byte(fmt.Sprintf("%s-k%03d", lang, j))
			out = append(out, line{key: k, value: fmt.Sprintf("%s=%d.%d.%s", k, phase, u, pad)})
			if u == 2 && (j+phase)%7 == 0 {
				out = append(out, line{key: k, value: tombstoneMarker})
			}
		}
	}
	return out
}

// latestRecord is what a key's latest record must be.
type latestRecord struct {
	producer  string
	pseq      uint64
	value     string
	tombstone bool
}

// compactProducer is one language's producer: an SDK's produce process, or Go in process.
type compactProducer struct {
	lang, id string
	sent     []line // every line given, in order (pseq = index + 1)
	mu       sync.Mutex
	acked    map[uint64]bool // pseq -> acknowledged
	failed   []string
	// SDK process
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	w      *bufio.Writer
	stderr bytes.Buffer
	done   chan error
	// Go
	goP *client.Producer
}

func (p *compactProducer) result(pseq uint64, ok bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acked[pseq] = ok
	if !ok {
		p.failed = append(p.failed, fmt.Sprintf("pseq %d: %s", pseq, why))
	}
}

func (p *compactProducer) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

func startCompactProducer(t *testing.T, ctx context.Context, b *broker.Broker, s *sdk, topic string) *compactProducer {
	t.Helper()
	p := &compactProducer{acked: map[uint64]bool{}, done: make(chan error, 1)}
	if s == nil {
		p.lang, p.id = "go", "go-cp"
		c := connect(t, b, broker.RoleProducer)
		var err error
		if p.goP, err = c.NewProducer(ctx, topic, client.ProducerOptions{ID: p.id}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p.lang, p.id = s.name, s.name+"-cp"
	p.cmd = exec.CommandContext(ctx, filepath.Join(s.dir, "produce"), "--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleProducer),
		"--topic", topic, "--producer-id", p.id, "--tombstone-marker", tombstoneMarker)
	p.cmd.Dir = s.dir
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start sdk/%s/produce: %v", s.name, err)
	}
	p.w = bufio.NewWriterSize(p.stdin, 1<<16)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var r result
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			why := ""
			if r.Error != nil {
				why = *r.Error
			}
			p.result(r.PSeq, r.Acked, why)
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- p.cmd.Wait()
	}()
	return p
}

// waitAllAcked waits (2 minutes at most) until every producer has an answer for each line it
// was given, and fails naming each producer's count and its last stderr lines otherwise.
func waitAllAcked(t *testing.T, producers []*compactProducer) {
	t.Helper()
	waitUntil(t, 2*time.Minute, "every producer's records acknowledged", func() bool {
		for _, p := range producers {
			if p.ackedCount() < len(p.sent) {
				return false
			}
		}
		return true
	}, func() string {
		var s []string
		for _, p := range producers {
			s = append(s, fmt.Sprintf("%s %d/%d (%s)", p.lang, p.ackedCount(), len(p.sent), lastLines(p.stderr.String(), 2)))
		}
		return strings.Join(s, "; ")
	})
}

// send gives the producer a phase's lines (an SDK's on its stdin; Go's sent in process).
func (p *compactProducer) send(t *testing.T, ctx context.Context, ls []line) {
	t.Helper()
	p.sent = append(p.sent, ls...)
	if p.goP != nil {
		for _, l := range ls {
			rec := client.Record{Key: l.key, Value: []byte(l.value)}
			if l.value == tombstoneMarker {
				rec = client.Record{Key: l.key, Tombstone: true}
			}
			if err := p.goP.Send(ctx, rec, func(r client.Result) {
				why := ""
				if r.Err != nil {
					why = r.Err.Error()
				}
				p.result(r.ProducerSeq, r.Err == nil, why)
			}); err != nil {
				t.Fatalf("go producer: %v", err)
			}
		}
		return
	}
	for _, l := range ls {
		if _, err := p.w.WriteString(l.text()); err != nil {
			t.Fatalf("sdk/%s/produce: write its input: %v; stderr: %s", p.lang, err, lastLines(p.stderr.String(), 5))
		}
	}
	if err := p.w.Flush(); err != nil {
		t.Fatalf("sdk/%s/produce: write its input: %v", p.lang, err)
	}
}

func (p *compactProducer) finish(t *testing.T, ctx context.Context) {
	t.Helper()
	if p.goP != nil {
		if err := p.goP.Close(ctx); err != nil {
			t.Errorf("go producer: %v", err)
		}
		return
	}
	p.stdin.Close()
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("sdk/%s/produce: %v; stderr: %s", p.lang, err, lastLines(p.stderr.String(), 10))
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("sdk/%s/produce did not finish; stderr: %s", p.lang, lastLines(p.stderr.String(), 10))
	}
}

// storedMsg is one message of a partition stream, read back by the test.
type storedMsg struct {
	partition int
	seq       uint64
	subject   string
	key       string
	hasKey    bool
	value     string
	producer  string
	pseq      uint64
	tombstone bool
	fence     bool
	ttl       string
	backfill  string // a copy's origin (wire.HeaderBackfill), "" for a record its producer wrote
}

// readAllStreams reads every message of every partition stream, in stream order, by direct
// "next message at or after" gets (no consumer; a compacted stream's gaps are skipped).
func readAllStreams(t *testing.T, ctx context.Context, c *client.Client, topic string) []storedMsg {
	t.Helper()
	desc, _, err := c.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedMsg
	for q := 0; q < desc.MaxPartitions(); q++ {
		s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		next, failures := uint64(1), 0
		for left := st.Msgs; left > 0; left-- {
			var m *jetstream.RawStreamMsg
			for {
				m, err = s.GetMsg(ctx, next, jetstream.WithGetMsgSubject(">"))
				if err == nil {
					break
				}
				if failures++; failures > 50 {
					t.Fatalf("stream %s: %v", wire.StreamName(topic, q), err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			next = m.Sequence + 1
			h := m.Header
			r := storedMsg{partition: q, seq: m.Sequence, subject: m.Subject, value: string(m.Data), producer: h.Get(wire.HeaderProducer),
				tombstone: h.Get(wire.HeaderTombstone) != "", fence: h.Get(wire.HeaderFence) != "", ttl: h.Get(wire.HeaderTTL),
				backfill: h.Get(wire.HeaderBackfill)}
			fmt.Sscan(h.Get(wire.HeaderSeq), &r.pseq)
			if v := h.Get(wire.HeaderKey); v != "" {
				k, err := wire.DecodeKey(v)
				if err != nil {
					t.Fatalf("stored key %q: %v", v, err)
				}
				r.key, r.hasKey = string(k), true
			}
			out = append(out, r)
		}
	}
	return out
}

// sdkCurrentEpochLine is one line of an SDK's consume command.
type sdkCurrentEpochLine struct {
	Partition int     `json:"partition"`
	Epoch     int     `json:"epoch"`
	Seq       uint64  `json:"seq"`
	Key       *string `json:"key"`
	KeyB64    *string `json:"key_b64"`
	Value     *string `json:"value"`
	Producer  string  `json:"producer"`
	PSeq      uint64  `json:"pseq"`
	Tombstone bool    `json:"tombstone"`
	Backfill  string  `json:"backfill"`
}

// checker is what checkOnePerKey reports to (a *testing.T, or a recorder in its own test).
type checker interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// checkOnePerKey requires exactly one delivery per key, its latest record, all of epoch `epoch`.
func checkOnePerKey(t checker, what string, got []sdkCurrentEpochLine, want map[string]latestRecord, epoch int) {
	t.Helper()
	seen := map[string]bool{}
	bad := 0
	for _, l := range got {
		var k string
		switch {
		case l.Key != nil:
			k = *l.Key
		case l.KeyB64 != nil:
			b, _ := base64.StdEncoding.DecodeString(*l.KeyB64)
			k = string(b)
		}
		v := ""
		if l.Value != nil {
			v = *l.Value
		}
		w, ok := want[k]
		switch {
		case seen[k]:
			t.Errorf("%s: key %q delivered twice", what, k)
			bad++
		case !ok:
			t.Errorf("%s: key %q was never sent", what, k)
			bad++
		case l.Epoch != epoch:
			t.Errorf("%s: key %q delivered from epoch %d (the current epoch is %d)", what, k, l.Epoch, epoch)
			bad++
		case l.Producer != w.producer || l.PSeq != w.pseq || v != w.value || l.Tombstone != w.tombstone:
			t.Errorf("%s: key %q: got %s/%d %.40q (tombstone %v), want its latest %s/%d %.40q (tombstone %v)", what, k, l.Producer, l.PSeq, v, l.Tombstone, w.producer, w.pseq, w.value, w.tombstone)
			bad++
		}
		seen[k] = true
		if bad > 20 {
			t.Fatalf("%s: too many errors", what)
		}
	}
	var missing []string
	for k := range want {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s: %d keys missing: %.300v", what, len(missing), missing)
	}
}

func TestCompactedTopicAcrossLanguages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts SDK processes")
	}
	sdks := takingPart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var changes, died atomic.Int32
	hook := func(topic, state string) error {
		if state == "active" {
			changes.Add(1)
		}
		if state == "backfilling" && changes.Load() == 2 && died.Add(1) == 1 {
			return errors.New("the broker dies inside the backfill (test)")
		}
		return nil
	}
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		RetryInterval: 100 * time.Millisecond, Testing: testhook.Steps(hook)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	const topic = "xcompact"
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "kafka-murmur2", Compact: true,
		DeleteRetentionMS: int64(time.Hour / time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	consumer := connect(t, b, broker.RoleConsumer)

	// The live group, from the beginning, all along.
	var liveMu sync.Mutex
	var liveDeliv []verify.Delivered
	var liveCopies int
	liveLast := map[string]*client.Message{}
	liveCn, err := consumer.NewConsumer(ctx, topic, client.ConsumerOptions{Group: "live", Start: client.StartBeginning, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	liveCtx, liveStop := context.WithCancel(ctx)
	liveDone := make(chan error, 1)
	go func() {
		liveDone <- liveCn.Run(liveCtx, func(_ context.Context, m *client.Message) error {
			liveMu.Lock()
			defer liveMu.Unlock()
			if m.Backfill != nil {
				liveCopies++
			}
			liveDeliv = append(liveDeliv, verify.Delivered{Group: "live", Order: int64(len(liveDeliv)), Producer: m.Producer, PSeq: m.ProducerSeq, Key: m.Key, NoKey: m.NoKey})
			liveLast[string(m.Key)] = m
			return nil
		})
	}()

	producers := []*compactProducer{startCompactProducer(t, ctx, b, nil, topic)}
	for i := range sdks {
		producers = append(producers, startCompactProducer(t, ctx, b, &sdks[i], topic))
	}
	phase := func(n int) {
		for _, p := range producers {
			p.send(t, ctx, compactPhase(p.lang, n))
		}
	}
	allAcked := func() { waitAllAcked(t, producers) }
	// A change comes while the phase's records are being written: the backfill runs beside them.
	change := func(what string, req wire.RepartitionRequest) {
		req.Topic = topic
		start := time.Now()
		if _, err := admin.Repartition(ctx, req); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		for {
			d, _, err := admin.Topic(ctx, topic)
			if err == nil && d.Change == nil && d.Backfilling() == nil {
				t.Logf("%s: epoch %d active and backfilled in %v: %+v", what, d.Current().Epoch, time.Since(start).Round(time.Millisecond), *d.Current().Backfill)
				break
			}
			if ctx.Err() != nil || time.Since(start) > 2*time.Minute {
				t.Fatalf("%s: the backfill did not end: %+v (%v)", what, d, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	phase(1)
	allAcked()
	phase(2)
	change("grow 4 -> 6", wire.RepartitionRequest{Partitions: 6})
	allAcked()
	phase(3)
	change("shrink 6 -> 3", wire.RepartitionRequest{Partitions: 3})
	allAcked()
	phase(4)
	change("swap to jump, 5 partitions", wire.RepartitionRequest{Partitions: 5, Partitioner: "jump"})
	allAcked()
	for _, p := range producers {
		p.finish(t, ctx)
		if len(p.failed) > 0 {
			t.Errorf("%s producer: %d records failed: %.500v", p.lang, len(p.failed), p.failed)
		}
	}
	if died.Load() == 0 {
		t.Fatal("the step hook never stopped a backfill")
	}

	want := map[string]latestRecord{}
	var sent []verify.Sent
	for _, p := range producers {
		p.mu.Lock()
		defer p.mu.Unlock()
		for i, l := range p.sent {
			pseq := uint64(i + 1)
			tomb := l.value == tombstoneMarker
			w := latestRecord{producer: p.id, pseq: pseq, value: l.value, tombstone: tomb}
			if tomb {
				w.value = ""
			}
			want[string(l.key)] = w
			sent = append(sent, verify.Sent{Producer: p.id, PSeq: pseq, Key: l.key, Acked: p.acked[pseq]})
		}
	}
	desc, _, err := admin.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	cur := desc.Current().Epoch
	t.Logf("%d producers, %d records, %d keys; epoch %d", len(producers), len(sent), len(want), cur)

	// The live group: everything acknowledged, in order per (producer, key), no copy again.
	waitUntil(t, time.Minute, "the live group to deliver every key's latest record", func() bool {
		liveMu.Lock()
		defer liveMu.Unlock()
		for k, w := range want {
			m := liveLast[k]
			if m == nil || m.Producer != w.producer || m.ProducerSeq != w.pseq {
				return false
			}
		}
		return true
	}, func() string { return "" })
	liveStop()
	if err := <-liveDone; err != nil {
		t.Fatalf("live group: %v", err)
	}
	liveMu.Lock()
	res := verify.Check(sent, liveDeliv, verify.Options{Groups: []string{"live"}, Compacted: true})
	if !res.OK() {
		t.Errorf("live group:\n%s", res)
	}
	if liveCopies > 0 {
		t.Errorf("the live group delivered %d backfilled copies of records it had delivered", liveCopies)
	}
	liveMu.Unlock()

	// Fresh groups at the current epoch: Go in process, and every SDK's consume command.
	var goFresh []sdkCurrentEpochLine
	{
		cn, err := consumer.NewConsumer(ctx, topic, client.ConsumerOptions{Group: "fresh-go", Start: client.StartCurrentEpoch, Heartbeat: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		var mu sync.Mutex
		last := time.Now()
		// Until every key came and then a second more (to see a key delivered twice), or 30 s
		// without a record (joining on a busy machine can take seconds).
		go func() {
			for rctx.Err() == nil {
				time.Sleep(200 * time.Millisecond)
				mu.Lock()
				idle := time.Since(last)
				done := len(goFresh) >= len(want) && idle > time.Second
				mu.Unlock()
				if done || idle > 30*time.Second {
					stop()
				}
			}
		}()
		if err := cn.Run(rctx, func(_ context.Context, m *client.Message) error {
			mu.Lock()
			defer mu.Unlock()
			k, v := string(m.Key), string(m.Value)
			l := sdkCurrentEpochLine{Partition: m.Partition, Epoch: m.Epoch, Seq: m.Seq, Key: &k, Value: &v, Producer: m.Producer, PSeq: m.ProducerSeq, Tombstone: m.Tombstone}
			goFresh = append(goFresh, l)
			last = time.Now()
			return nil
		}); err != nil {
			t.Fatalf("fresh Go group: %v", err)
		}
		stop()
	}
	checkOnePerKey(t, "fresh Go group at the current epoch", goFresh, want, cur)
	var wg sync.WaitGroup
	outs := make([][]sdkCurrentEpochLine, len(sdks))
	errs := make([]string, len(sdks))
	for i, s := range sdks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, filepath.Join(s.dir, "consume"), "--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleConsumer),
				"--topic", topic, "--group", "fresh-"+s.name, "--from", "current-epoch", "--max", fmt.Sprint(len(want)), "--idle-exit", "30s", "--heartbeat", "300ms")
			cmd.Dir = s.dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Sprintf("%v: %s", err, lastLines(stderr.String(), 5))
				return
			}
			for _, ln := range bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n")) {
				var l sdkCurrentEpochLine
				if len(ln) > 0 && json.Unmarshal(ln, &l) == nil {
					outs[i] = append(outs[i], l)
				}
			}
		}()
	}
	wg.Wait()
	for i, s := range sdks {
		if errs[i] != "" {
			t.Errorf("sdk/%s/consume --from current-epoch: %s", s.name, errs[i])
			continue
		}
		copies := 0
		for _, l := range outs[i] {
			if l.Backfill != "" {
				copies++
			}
		}
		t.Logf("sdk/%s: fresh group at the current epoch: %d records, %d of them backfilled copies", s.name, len(outs[i]), copies)
		checkOnePerKey(t, "fresh "+s.name+" group at the current epoch", outs[i], want, cur)
	}

	// What the streams hold: in the current epoch exactly every key's latest record, where the
	// native partitioner puts it; after retiring, nothing older.
	native, err := partitioner.Native("jump")
	if err != nil {
		t.Fatal(err)
	}
	checkStreams := func(retired bool) {
		seen := map[string]bool{}
		for _, s := range readAllStreams(t, ctx, admin, topic) {
			if s.fence {
				continue
			}
			_, e, q, token, err := wire.SplitRecordSubject(s.subject)
			if err != nil || q != s.partition || !s.hasKey || token != wire.KeyToken([]byte(s.key)) {
				t.Errorf("stored record at %d/%d has subject %q for key %q", s.partition, s.seq, s.subject, s.key)
				continue
			}
			if e != cur {
				if retired {
					t.Errorf("after retiring, partition %d still holds a record of epoch %d at %d (key %q)", s.partition, e, s.seq, s.key)
				}
				continue
			}
			if p, _ := native.Partition([]byte(s.key), int32(desc.Current().Partitions)); int(p) != s.partition {
				t.Errorf("key %q is stored in partition %d; the native partitioner says %d", s.key, s.partition, p)
			}
			if seen[s.key] {
				t.Errorf("key %q has two records in epoch %d", s.key, e)
			}
			seen[s.key] = true
			w := want[s.key]
			if s.producer != w.producer || s.pseq != w.pseq || s.value != w.value || s.tombstone != w.tombstone {
				t.Errorf("key %q: epoch %d holds %s/%d %.40q (tombstone %v), want %s/%d %.40q (tombstone %v)", s.key, e, s.producer, s.pseq, s.value, s.tombstone, w.producer, w.pseq, w.value, w.tombstone)
			}
			// 3600 s, or the hold while a backfill ran (spec/protocol.md §10.2).
			if hold := fmt.Sprint(wire.TombstoneHoldMS / 1000); s.tombstone && s.ttl != "3600" && s.ttl != hold {
				t.Errorf("tombstone of key %q is stored with Nats-TTL %q, want 3600 (or %s, held for a backfill)", s.key, s.ttl, hold)
			}
		}
		for k := range want {
			if !seen[k] {
				t.Errorf("key %q has no record in the current epoch %d", k, cur)
			}
		}
	}
	checkStreams(false)
	if _, err := admin.RetireEpochs(ctx, topic, 0); err != nil {
		t.Fatalf("retire: %v", err)
	}
	checkStreams(true)
	tombs := 0
	for _, w := range want {
		if w.tombstone {
			tombs++
		}
	}
	t.Logf("checked: %d keys (%d tombstoned) in %d languages", len(want), tombs, len(producers))
}

// recorder is a checker that keeps what it was told.
type recorder struct{ errs []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckOnePerKeyCatchesWrongOutcomes: the current-epoch checker fails on a stale value, a
// key delivered twice, a missing key, a tombstone delivered as a value, a record of an older
// epoch and a key nobody sent, and passes the right outcome.
func TestCheckOnePerKeyCatchesWrongOutcomes(t *testing.T) {
	str := func(s string) *string { return &s }
	want := map[string]latestRecord{
		"a": {producer: "p", pseq: 3, value: "a3"},
		"b": {producer: "p", pseq: 4, tombstone: true},
	}
	right := []sdkCurrentEpochLine{
		{Epoch: 2, Key: str("a"), Value: str("a3"), Producer: "p", PSeq: 3},
		{Epoch: 2, Key: str("b"), Value: str(""), Producer: "p", PSeq: 4, Tombstone: true},
	}
	var ok recorder
	checkOnePerKey(&ok, "right", right, want, 2)
	if len(ok.errs) > 0 {
		t.Fatalf("the right outcome failed: %v", ok.errs)
	}
	cases := map[string]struct {
		got  []sdkCurrentEpochLine
		says string
	}{
		"stale value":          {[]sdkCurrentEpochLine{{Epoch: 2, Key: str("a"), Value: str("a1"), Producer: "p", PSeq: 1}, right[1]}, "want its latest"},
		"twice":                {append(append([]sdkCurrentEpochLine{}, right...), right[0]), "delivered twice"},
		"missing":              {right[:1], "keys missing"},
		"tombstone as a value": {[]sdkCurrentEpochLine{right[0], {Epoch: 2, Key: str("b"), Value: str(""), Producer: "p", PSeq: 4}}, "tombstone"},
		"older epoch":          {[]sdkCurrentEpochLine{{Epoch: 1, Key: str("a"), Value: str("a3"), Producer: "p", PSeq: 3}, right[1]}, "from epoch 1"},
		"never sent":           {append(append([]sdkCurrentEpochLine{}, right...), sdkCurrentEpochLine{Epoch: 2, Key: str("z"), Value: str("z")}), "never sent"},
	}
	for name, c := range cases {
		var r recorder
		checkOnePerKey(&r, name, c.got, want, 2)
		if !strings.Contains(strings.Join(r.errs, "\n"), c.says) {
			t.Errorf("%s: the checker said %q, want a failure mentioning %q", name, r.errs, c.says)
		}
	}
}
