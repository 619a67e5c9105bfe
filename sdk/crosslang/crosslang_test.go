// Package crosslang checks that the SDKs of every language put a key in the same partition and
// keep its order, writing into one topic at the same time, also across an epoch change.
//
// An SDK joins by having a directory sdk/<lang>/ with two executables (the convention every SDK
// follows):
//
//   - setup: installs what the SDK needs into its own directory; idempotent; exit 0 when ready,
//     else non-zero with the reason on stderr;
//   - produce --server URL --creds FILE --topic T --producer-id ID: reads "key<TAB>value" lines
//     from stdin (UTF-8; a line without a tab is a keyless record whose value is the line),
//     produces them in order with the SDK's producer, and prints one JSON line per record when
//     its fate is known: {"pseq": n, "acked": true|false, "partition": p, "epoch": e, "seq": s,
//     "error": "..."}, pseq being the record's Pctl-Seq (1-based, stdin order); exit 0 when every
//     record was acknowledged. With --tombstone-marker M a line "key<TAB>M" sends a tombstone
//     for key instead (spec/protocol.md §10.2; compact_test.go);
//   - consume (group_test.go) takes --from now|beginning|current-epoch and prints "tombstone":
//     true and "backfill": "<epoch>/<partition>/<seq>" as pctl consume does.
//
// A Go producer (client.Producer, in process) writes the same lines beside them. A Go consumer
// group then reads the topic and the test checks that every key's records, from every language,
// are in one partition per epoch, the one the epoch's module gives (client.Partitioner, the
// semantics of `pctl partition`); that every acknowledged record is delivered; and that each
// producer's per-key order holds (client/verify).
//
// An SDK whose setup fails is skipped with its reason, unless PCTL_REQUIRE_TOOLCHAINS=1 (CI),
// which also requires the node, python and java SDKs to be present.
package crosslang

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/testhook"
)

// required are the SDKs that must take part when PCTL_REQUIRE_TOOLCHAINS=1.
var required = []string{"java", "node", "python"}

const (
	numKeys     = 20000 // distinct keys, the same in every language
	passes      = 2     // each key is sent this many times per producer (per-key order needs two)
	keylessRecs = 100   // keyless lines per producer
)

// secondPassStride: the second pass sends every key (every fourth under the race detector).
func secondPassStride() int {
	if raceEnabled {
		return 4
	}
	return 1
}

func requireToolchains() bool { return os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" }

type sdk struct {
	name string
	dir  string
}

// discover lists sdk/*/ directories with executable setup and produce, and says why each other
// directory is not an SDK of this test.
func discover(t *testing.T) ([]sdk, map[string]string) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var out []sdk
	broken := map[string]string{}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "crosslang" {
			continue
		}
		dir := filepath.Join(root, e.Name())
		var why []string
		for _, f := range []string{"setup", "produce"} {
			fi, err := os.Stat(filepath.Join(dir, f))
			switch {
			case err != nil:
				why = append(why, "no "+f+" file")
			case fi.IsDir() || fi.Mode()&0o111 == 0:
				why = append(why, f+" is not an executable file")
			}
		}
		if len(why) == 0 {
			out = append(out, sdk{name: e.Name(), dir: dir})
		} else {
			broken[e.Name()] = strings.Join(why, "; ")
		}
	}
	return out, broken
}

// takingPart discovers and sets up the SDKs and says loudly which languages take part. A
// required SDK that cannot take part fails the test with PCTL_REQUIRE_TOOLCHAINS=1; otherwise
// every SDK that cannot is a skipped subtest with its reason.
func takingPart(t *testing.T) []sdk {
	found, broken := discover(t)
	sdks, failed := setupCached(t, found)
	for name, why := range failed {
		broken[name] = why
	}
	ready := map[string]bool{}
	langs := []string{"go (in process)"}
	for _, s := range sdks {
		ready[s.name] = true
		langs = append(langs, s.name)
	}
	var missing []string
	for _, r := range required {
		if !ready[r] {
			why := broken[r]
			if why == "" {
				why = "no directory sdk/" + r
			}
			missing = append(missing, "sdk/"+r+": "+why)
		}
	}
	t.Logf("LANGUAGES TAKING PART: %s", strings.Join(langs, ", "))
	switch {
	case requireToolchains():
		for _, m := range missing {
			t.Errorf("required SDK missing or not ready (PCTL_REQUIRE_TOOLCHAINS=1): %s", m)
		}
		for name, why := range broken {
			if !slices.Contains(required, name) {
				t.Errorf("sdk/%s is not ready (PCTL_REQUIRE_TOOLCHAINS=1): %s", name, why)
			}
		}
	case len(missing) > 0:
		t.Logf("LANGUAGES MISSING: %s. This run does not check them (with PCTL_REQUIRE_TOOLCHAINS=1 it fails)", strings.Join(missing, "; "))
	}
	if !requireToolchains() {
		for name, why := range broken {
			t.Run("sdk/"+name, func(t *testing.T) { t.Skipf("not taking part: %s", why) })
		}
	}
	if len(sdks) == 0 {
		t.Logf("NO SDK BESIDES GO TOOK PART: this run checks Go against itself only")
	}
	return sdks
}

// setupAll runs every SDK's setup at once and returns the SDKs that are ready, and why each other
// one is not.
func setupAll(t *testing.T, sdks []sdk) ([]sdk, map[string]string) {
	reasons := make([]string, len(sdks))
	var wg sync.WaitGroup
	for i, s := range sdks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, filepath.Join(s.dir, "setup"))
			cmd.Dir = s.dir
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				reasons[i] = fmt.Sprintf("%v: %s", err, lastLines(stderr.String(), 5))
				return
			}
			t.Logf("sdk/%s: setup in %v: %s", s.name, time.Since(start).Round(time.Millisecond), lastLines(string(out), 1))
		}()
	}
	wg.Wait()
	var ready []sdk
	failed := map[string]string{}
	for i, s := range sdks {
		if reasons[i] == "" {
			ready = append(ready, s)
		} else {
			failed[s.name] = "setup failed: " + reasons[i]
		}
	}
	return ready, failed
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// TestCrossLanguage runs two scenarios, each on its own topic: every producer writing at once,
// and the same with an epoch change (more partitions) in the middle of the run.
func TestCrossLanguage(t *testing.T) {
	sdks := takingPart(t)
	if t.Failed() {
		t.FailNow()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var hook changeHook
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000, Testing: testhook.Steps(hook.step)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)

	t.Run("steady", func(t *testing.T) {
		run(t, ctx, b, admin, &hook, sdks, scenario{topic: "xl-steady", partitions: 6, partitioner: "kafka-murmur2"})
	})
	t.Run("epoch-change", func(t *testing.T) {
		run(t, ctx, b, admin, &hook, sdks, scenario{topic: "xl-epoch", partitions: 3, partitioner: "librdkafka-consistent", grow: 8})
	})
}

func connect(t *testing.T, b *broker.Broker, role string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(role), Name: "crosslang " + role})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type scenario struct {
	topic       string
	partitions  int
	partitioner string
	grow        int // > 0: repartition to this many partitions in the middle of the run
}

// line is one input line: the same list for every producer.
type line struct {
	key   []byte
	noKey bool
	value string
}

// inputLines: numKeys keys (ASCII, some with multi-byte UTF-8, and the empty key), each sent
// `passes` times in the same key order (see secondPassStride), with keyless lines among them.
func inputLines() []line {
	keys := make([][]byte, numKeys)
	for i := range keys {
		switch {
		case i == 0:
			keys[i] = []byte{} // the empty key is a key
		case i%997 == 0:
			keys[i] = []byte(fmt.Sprintf("ключ-%d-键-é", i))
		default:
			keys[i] = []byte(fmt.Sprintf("user-%05d", i))
		}
	}
	var out []line
	every := passes * numKeys / keylessRecs
	for p := 0; p < passes; p++ {
		for i, k := range keys {
			if p > 0 && i%secondPassStride() != 0 {
				continue
			}
			out = append(out, line{key: k, value: fmt.Sprintf("p%d-%d", p, i)})
			if (p*numKeys+i)%every == every-1 {
				out = append(out, line{noKey: true, value: fmt.Sprintf("keyless-%d-%d", p, i)})
			}
		}
	}
	return out
}

func (l line) text() string {
	if l.noKey {
		return l.value + "\n"
	}
	return string(l.key) + "\t" + l.value + "\n"
}

// result is one line of a produce command's output (or the Go producer's result).
type result struct {
	PSeq      uint64  `json:"pseq"`
	Acked     bool    `json:"acked"`
	Partition *int    `json:"partition"`
	Epoch     *int    `json:"epoch"`
	Seq       *uint64 `json:"seq"`
	Error     *string `json:"error"`
}

// producerRun is one producer's run: its id, its results and how it ended.
type producerRun struct {
	lang     string
	id       string
	mu       sync.Mutex
	results  []result
	progress atomic.Int64 // results received
	finished atomic.Bool
	err      error
	stderr   string
	took     time.Duration
}

// changeHook is the broker's step hook (internal/testhook): it lets a scenario hold an epoch change at a step.
type changeHook struct {
	mu sync.Mutex
	at map[string]func(state string) // by topic
}

func (h *changeHook) step(topic, state string) error {
	h.mu.Lock()
	f := h.at[topic]
	h.mu.Unlock()
	if f != nil {
		f(state)
	}
	return nil
}

func (h *changeHook) set(topic string, f func(state string)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at == nil {
		h.at = map[string]func(string){}
	}
	h.at[topic] = f
}

func run(t *testing.T, ctx context.Context, b *broker.Broker, admin *client.Client, hook *changeHook, sdks []sdk, sc scenario) {
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: sc.topic, Partitions: sc.partitions, Partitioner: sc.partitioner}); err != nil {
		t.Fatal(err)
	}
	lines := inputLines()
	// Until the epoch change has started, producers get only the first part of their input; the
	// rest comes while the broker changes the epoch, so that every producer is writing then.
	split := len(lines)
	if sc.grow > 0 {
		split = len(lines) * 2 / 5
	}
	release := make(chan struct{})
	if sc.grow == 0 {
		close(release)
	}

	var runs []*producerRun
	var wg sync.WaitGroup
	start := time.Now()
	goRun := &producerRun{lang: "go", id: "go-" + sc.topic}
	runs = append(runs, goRun)
	wg.Add(1)
	go func() {
		defer wg.Done()
		goRun.err = produceGo(ctx, b, sc.topic, goRun, lines, split, release)
		goRun.took = time.Since(start)
		goRun.finished.Store(true)
	}()
	for _, s := range sdks {
		pr := &producerRun{lang: s.name, id: s.name + "-" + sc.topic}
		runs = append(runs, pr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr.err = produceSDK(ctx, b, s, sc.topic, pr, lines, split, release)
			pr.took = time.Since(start)
			pr.finished.Store(true)
		}()
	}

	if sc.grow > 0 {
		// Change the epoch once every producer has a quarter of its records acknowledged (so it
		// has records in the old epoch and is busy), then let the rest of the input flow.
		deadline := time.Now().Add(5 * time.Minute)
		for {
			low := 0
			for _, pr := range runs {
				if pr.progress.Load() < int64(len(lines)/4) {
					low++
				}
			}
			if low == 0 || time.Now().After(deadline) || anyDone(runs) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The rest of the input is released when the change is under way: its new partitions
		// are created and the old ones not yet fenced (the broker's step hook), while every
		// producer is still writing the first part of its input.
		var at []int64
		hook.set(sc.topic, func(state string) {
			if state != "created" {
				return
			}
			for _, pr := range runs {
				at = append(at, pr.progress.Load())
			}
			close(release)
		})
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: sc.topic, Partitions: sc.grow}); err != nil {
			t.Errorf("repartition to %d partitions: %v", sc.grow, err)
		}
		hook.set(sc.topic, nil)
		for i, pr := range runs {
			if i < len(at) {
				t.Logf("%s producer: %d of %d results when the change was under way", pr.lang, at[i], len(lines))
			}
		}
		select {
		case <-release:
		default:
			t.Fatal("the epoch change never reached its \"created\" step")
		}
	}
	wg.Wait()
	for _, pr := range runs {
		t.Logf("%s producer %s: %d results in %v", pr.lang, pr.id, len(pr.results), pr.took.Round(time.Millisecond))
		if pr.err != nil {
			t.Errorf("%s producer: %v; stderr: %s", pr.lang, pr.err, lastLines(pr.stderr, 10))
		}
	}

	// What each producer says it sent.
	var sent []verify.Sent
	acked := 0
	for _, pr := range runs {
		byPSeq := map[uint64]result{}
		for _, r := range pr.results {
			if _, dup := byPSeq[r.PSeq]; dup || r.PSeq < 1 || r.PSeq > uint64(len(lines)) {
				t.Errorf("%s producer: bad or repeated pseq %d", pr.lang, r.PSeq)
				continue
			}
			byPSeq[r.PSeq] = r
		}
		if len(byPSeq) != len(lines) {
			t.Errorf("%s producer: %d results for %d lines", pr.lang, len(byPSeq), len(lines))
		}
		failed := 0
		for i, l := range lines {
			r, ok := byPSeq[uint64(i+1)]
			sent = append(sent, verify.Sent{Producer: pr.id, PSeq: uint64(i + 1), Key: l.key, NoKey: l.noKey, Acked: ok && r.Acked})
			if ok && r.Acked {
				acked++
			} else if failed++; failed <= 3 {
				msg := "no result"
				if ok && r.Error != nil {
					msg = *r.Error
				}
				t.Errorf("%s producer: record %d not acknowledged: %s", pr.lang, i+1, msg)
			}
		}
	}
	if t.Failed() && acked == 0 {
		t.FailNow()
	}

	desc, _, err := admin.Topic(ctx, sc.topic)
	if err != nil {
		t.Fatal(err)
	}
	if sc.grow > 0 && len(desc.Epochs) != 2 {
		t.Fatalf("topic has %d epochs; the run should span one epoch change", len(desc.Epochs))
	}
	part := partitionFunc(t, ctx, admin, desc)

	// The partition each producer reports for a keyed record is the epoch's module's answer.
	for _, pr := range runs {
		epochs := map[int]int{}
		wrong := 0
		for _, r := range pr.results {
			if !r.Acked || r.PSeq < 1 || r.PSeq > uint64(len(lines)) {
				continue
			}
			if r.Partition == nil || r.Epoch == nil {
				t.Errorf("%s producer: acknowledged record %d without partition or epoch", pr.lang, r.PSeq)
				continue
			}
			epochs[*r.Epoch]++
			l := lines[r.PSeq-1]
			if !l.noKey && *r.Partition != part(*r.Epoch, l.key) {
				if wrong++; wrong <= 3 {
					t.Errorf("%s producer: key %q reported in partition %d of epoch %d; the epoch's module says %d", pr.lang, l.key, *r.Partition, *r.Epoch, part(*r.Epoch, l.key))
				}
			}
		}
		t.Logf("%s producer: acknowledged records per epoch: %v", pr.lang, epochs)
		if sc.grow > 0 && (epochs[1] == 0 || epochs[2] == 0) {
			t.Errorf("%s producer: records in epochs %v; the epoch change should have come in the middle of its run", pr.lang, epochs)
		}
	}

	delivered, places := consumeAll(t, ctx, b, sc.topic, acked)

	// Every key's records, from every language, sit in the partition the epoch's module gives.
	type ek struct {
		epoch int
		key   string
	}
	where := map[ek]map[int]map[string]bool{} // (epoch, key) -> partition -> producers
	for i, d := range delivered {
		if d.NoKey {
			continue
		}
		pl := places[i]
		k := ek{pl.epoch, string(d.Key)}
		if where[k] == nil {
			where[k] = map[int]map[string]bool{}
		}
		if where[k][pl.partition] == nil {
			where[k][pl.partition] = map[string]bool{}
		}
		where[k][pl.partition][d.Producer] = true
	}
	split2, wrong, multi := 0, 0, 0
	for k, ps := range where {
		if len(ps) > 1 {
			if split2++; split2 <= 3 {
				t.Errorf("key %q of epoch %d is in %d partitions: %v", k.key, k.epoch, len(ps), ps)
			}
		}
		want := part(k.epoch, []byte(k.key))
		for p, prods := range ps {
			if len(prods) == len(runs) {
				multi++
			}
			if p != want {
				if wrong++; wrong <= 3 {
					t.Errorf("key %q of epoch %d delivered from partition %d (producers %v); the epoch's module says %d", k.key, k.epoch, p, keys(prods), want)
				}
			}
		}
	}
	t.Logf("%d (epoch, key) pairs; %d written by all %d producers into one partition; %d split; %d in a wrong partition", len(where), multi, len(runs), split2, wrong)

	// Every acknowledged record is delivered, and each producer's per-key order holds.
	// Every producer's log is here (so a record none of them sent fails), and no member crashed
	// (so a duplicate fails too).
	res := verify.Check(sent, delivered, verify.Options{Groups: []string{"xl"}, NoDuplicates: true})
	t.Logf("%v", res)
	if !res.OK() {
		t.Errorf("order check failed: %s", res)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// anyDone reports whether a producer has finished (before the rest of its input: it failed).
func anyDone(runs []*producerRun) bool {
	for _, pr := range runs {
		if pr.finished.Load() {
			return true
		}
	}
	return false
}

// partitionFunc returns f(epoch, key): the partition the epoch's module gives the key, the
// semantics of `pctl partition` (client.Partitioner loads the epoch's module by digest).
func partitionFunc(t *testing.T, ctx context.Context, c *client.Client, desc *wire.Topic) func(int, []byte) int {
	type part interface {
		Partition(key []byte, n int32) (int32, error)
	}
	parts := map[int]part{}
	ns := map[int]int{}
	for _, e := range desc.Epochs {
		p, err := c.Partitioner(ctx, e.Partitioner)
		if err != nil {
			t.Fatal(err)
		}
		parts[e.Epoch], ns[e.Epoch] = p, e.Partitions
	}
	var mu sync.Mutex
	cache := map[string]int{}
	return func(epoch int, key []byte) int {
		ck := fmt.Sprintf("%d/%x", epoch, key)
		mu.Lock()
		defer mu.Unlock()
		if v, ok := cache[ck]; ok {
			return v
		}
		p, ok := parts[epoch]
		if !ok {
			t.Errorf("no epoch %d", epoch)
			return -1
		}
		r, err := p.Partition(key, int32(ns[epoch]))
		if err != nil {
			t.Errorf("partition %q in epoch %d: %v", key, epoch, err)
			return -1
		}
		cache[ck] = int(r)
		return int(r)
	}
}

// produceGo writes the lines with the Go client's producer, in process.
func produceGo(ctx context.Context, b *broker.Broker, topic string, pr *producerRun, lines []line, split int, release <-chan struct{}) error {
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleProducer), Name: "crosslang go"})
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := c.NewProducer(ctx, topic, client.ProducerOptions{ID: pr.id})
	if err != nil {
		return err
	}
	for i, l := range lines {
		if i == split {
			<-release
		}
		err := p.Send(ctx, client.Record{Key: l.key, NoKey: l.noKey, Value: []byte(l.value)}, func(r client.Result) {
			res := result{PSeq: r.ProducerSeq, Acked: r.Err == nil}
			if r.Err == nil {
				part, epoch, seq := r.Partition, r.Epoch, r.Seq
				res.Partition, res.Epoch, res.Seq = &part, &epoch, &seq
			} else {
				msg := r.Err.Error()
				res.Error = &msg
			}
			pr.mu.Lock()
			pr.results = append(pr.results, res)
			pr.mu.Unlock()
			pr.progress.Add(1)
		})
		if err != nil {
			return err
		}
	}
	return p.Close(ctx)
}

// produceSDK runs an SDK's produce command with the lines on its stdin.
func produceSDK(ctx context.Context, b *broker.Broker, s sdk, topic string, pr *producerRun, lines []line, split int, release <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.dir, "produce"), "--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleProducer),
		"--topic", topic, "--producer-id", pr.id)
	cmd.Dir = s.dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	writeErr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<16)
		var err error
		for i, l := range lines {
			if i == split {
				if err = w.Flush(); err != nil {
					break
				}
				<-release
			}
			if _, err = w.WriteString(l.text()); err != nil {
				break
			}
		}
		if err == nil {
			err = w.Flush()
		}
		stdin.Close()
		writeErr <- err
	}()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var parseErr error
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			if parseErr == nil {
				parseErr = fmt.Errorf("stdout line %q: %v", sc.Text(), err)
			}
			continue
		}
		pr.mu.Lock()
		pr.results = append(pr.results, r)
		pr.mu.Unlock()
		pr.progress.Add(1)
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	pr.stderr = stderr.String()
	if werr := <-writeErr; werr != nil && err == nil {
		err = fmt.Errorf("writing its stdin: %v", werr)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("sdk/%s/produce exited with %d", s.name, ee.ExitCode())
		}
		return fmt.Errorf("sdk/%s/produce: %v", s.name, err)
	}
	return parseErr
}

type place struct{ partition, epoch int }

// consumeAll reads the topic with a Go consumer group until `want` distinct records arrived (and
// a moment longer, to see duplicates; the checker fails on any), recording the global delivery
// order.
func consumeAll(t *testing.T, ctx context.Context, b *broker.Broker, topic string, want int) ([]verify.Delivered, []place) {
	c := connect(t, b, broker.RoleConsumer)
	cn, err := c.NewConsumer(ctx, topic, client.ConsumerOptions{Group: "xl", Member: "m1", FromBeginning: true, Heartbeat: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var delivered []verify.Delivered
	var places []place
	var order int64
	distinct := map[string]bool{}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- cn.Run(rctx, func(_ context.Context, m *client.Message) error {
			mu.Lock()
			order++
			delivered = append(delivered, verify.Delivered{Group: "xl", Member: "m1", Order: order, Producer: m.Producer, PSeq: m.ProducerSeq, Key: m.Key, NoKey: m.NoKey})
			places = append(places, place{m.Partition, m.Epoch})
			distinct[fmt.Sprint(m.Producer, "/", m.ProducerSeq)] = true
			mu.Unlock()
			return nil
		})
	}()
	start := time.Now()
	last, lastChange := 0, time.Now()
	for {
		mu.Lock()
		n := len(distinct)
		mu.Unlock()
		if n != last {
			last, lastChange = n, time.Now()
		}
		if n >= want && time.Since(lastChange) > 500*time.Millisecond {
			break
		}
		if time.Since(lastChange) > 60*time.Second {
			t.Errorf("consumer: %d of %d records after %v, none for a minute", n, want, time.Since(start).Round(time.Second))
			break
		}
		select {
		case err := <-done:
			t.Fatalf("consumer stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("consumer: %v", err)
	}
	t.Logf("consumer: %d deliveries in %v", len(delivered), time.Since(start).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	return delivered, places
}
