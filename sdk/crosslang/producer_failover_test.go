package crosslang

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/natscluster"
)

// failoverRows are the producers TestProducerFailover runs, one line per language: "go" is
// client.Producer in process (the baseline); every other row is sdk/<lang>/produce, the command
// every SDK has (see the package comment), given every node's URL comma-separated in --server and
// the cluster's NKey seed file in --creds (an SDK's produce must take both). A row whose SDK is
// not set up is skipped (fails with PCTL_REQUIRE_TOOLCHAINS=1 for a required language).
var failoverRows = []string{
	"go",
	"python",
	"node",
	"java",
}

// TestProducerFailover: each row's producer writes keyed records at a steady pace into a topic of
// 3-replica partition streams on a 3-node cluster of nats-server processes while the test kills
// (kill -9) the node of a partition's stream leader and restarts it, then pauses (SIGSTOP, 4 s)
// the node of a partition's stream leader. Then every partition
// stream is read back in stream order from its leader ($JS.API.STREAM.MSG.GET) and checked with
// client/verify: every acknowledged record stored, each key's records in the producer's send
// order (spec/protocol.md §5.1.2), and no record of the run failed.
func TestProducerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nats-server processes")
	}
	found, broken := discover(t)
	ready, failed := setupCached(t, found)
	for k, v := range failed {
		broken[k] = v
	}
	dirs := map[string]string{}
	for _, s := range ready {
		dirs[s.name] = s.dir
	}
	for _, lang := range failoverRows {
		t.Run(lang, func(t *testing.T) {
			dir := ""
			if lang != "go" {
				dir = dirs[lang]
				if dir == "" {
					why := broken[lang]
					if why == "" {
						why = "no directory sdk/" + lang
					}
					if requireToolchains() && slices.Contains(required, lang) {
						t.Fatalf("sdk/%s cannot take part (PCTL_REQUIRE_TOOLCHAINS=1): %s", lang, why)
					}
					t.Skipf("sdk/%s not taking part: %s", lang, why)
				}
			}
			failoverRun(t, lang, dir)
		})
	}
}

const (
	failoverPartitions = 4
	failoverKeys       = 200
	failoverFor        = 16 * time.Second // the producer writes this long
	failoverBurst      = 25               // lines every failoverTick: 500 records/s, 125 per partition (issue 10's pace)
	failoverTick       = 50 * time.Millisecond
)

func failoverRun(t *testing.T, lang, dir string) {
	c := natscluster.Start(t, natscluster.Options{Nodes: 3, Logf: t.Logf})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: 3, ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds(), Timeout: 20 * time.Second, Name: "failover admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topic := "fo-" + lang
	// The broker's subscriptions may not have reached every node yet: retry while nothing answers.
	for deadline := time.Now().Add(15 * time.Second); ; {
		_, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: failoverPartitions, Partitioner: "kafka-murmur2", Replicas: 3})
		if err == nil {
			break
		}
		if !errors.Is(err, wire.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The input: keyed lines, each key's values in order; the producer gets them at a steady pace.
	rng := rand.New(rand.NewSource(int64(len(lang))))
	var lines []line
	for i := 0; i < int(failoverFor/failoverTick)*failoverBurst; i++ {
		lines = append(lines, line{key: []byte(fmt.Sprint("k", rng.Intn(failoverKeys))), value: fmt.Sprint(i)})
	}
	feed := make(chan line, 1024)
	go func() {
		defer close(feed)
		tick := time.NewTicker(failoverTick)
		defer tick.Stop()
		for i := 0; i < len(lines); i += failoverBurst {
			<-tick.C
			for _, l := range lines[i:min(i+failoverBurst, len(lines))] {
				select {
				case feed <- l:
				case <-ctx.Done():
					return
				}
			}
		}
	}()

	pr := &producerRun{lang: lang, id: "fo-" + lang}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if lang == "go" {
			pr.err = failoverGo(ctx, c, topic, pr, feed)
		} else {
			pr.err = failoverSDK(ctx, c, dir, topic, pr, feed)
		}
	}()

	// Faults: the node of a partition stream's leader is killed (kill -9) and restarted; then the
	// node of a (maybe other) partition's leader is paused (SIGSTOP) for 4 s.
	frng := rand.New(rand.NewSource(int64(len(lang)) * 31))
	start := time.Now()
	for i, at := range []time.Duration{3 * time.Second, 9 * time.Second} {
		time.Sleep(time.Until(start.Add(at)))
		q := frng.Intn(failoverPartitions)
		leader, err := c.StreamLeader(ctx, wire.StreamName(topic, q))
		if err != nil {
			t.Fatalf("fault %d: no leader of partition %d: %v", i, q, err)
		}
		if i%2 == 0 {
			t.Logf("fault %d: kill -9 %s, the leader of partition %d", i, c.Name(leader), q)
			if err := c.Kill(leader); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
			if err := c.Restart(leader); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Logf("fault %d: SIGSTOP %s, the leader of partition %d, for 4 s", i, c.Name(leader), q)
		if err := c.Stop(leader); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		if err := c.Cont(leader); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("the %s producer did not finish: %v", lang, ctx.Err())
	}
	if pr.err != nil {
		t.Errorf("the %s producer: %v; stderr: %s", lang, pr.err, lastLines(pr.stderr, 20))
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	stored := readStreamsFromLeader(ctx, t, c, topic, failoverPartitions)
	pr.mu.Lock()
	results := slices.Clone(pr.results)
	pr.mu.Unlock()
	sent := make([]verify.Sent, len(lines))
	for i, l := range lines {
		sent[i] = verify.Sent{Producer: pr.id, PSeq: uint64(i + 1), Key: l.key}
	}
	acked, failedN := 0, 0
	var firstErr string
	for _, r := range results {
		if r.PSeq < 1 || r.PSeq > uint64(len(sent)) {
			t.Errorf("a result for record %d, which was never sent", r.PSeq)
			continue
		}
		sent[r.PSeq-1].Acked = r.Acked
		if r.Acked {
			acked++
		} else {
			failedN++
			if firstErr == "" && r.Error != nil {
				firstErr = *r.Error
			}
		}
	}
	res := verify.Check(sent, stored, verify.Options{Groups: []string{"storage"}})
	t.Logf("%s: %d records sent, %d acknowledged, %d failed, %d without a result; %d stored; the producer's log: %d batches settled, %d read back with records missing, %d SERVER FAULT",
		lang, len(lines), acked, failedN, len(lines)-len(results), len(stored), strings.Count(pr.stderr, "settling batch"),
		strings.Count(pr.stderr, "after a leader change"), strings.Count(pr.stderr, "SERVER FAULT"))
	if lang != "go" {
		t.Logf("%s producer's last words: %s", lang, lastLines(pr.stderr, 1))
	}
	if acked != len(lines) {
		t.Errorf("%d of %d records not acknowledged (first error: %s): a failover must not fail records; stderr: %s",
			len(lines)-acked, len(lines), firstErr, lastLines(pr.stderr, 20))
	}
	if !res.OK() {
		t.Errorf("storage check failed:\n%s\nproducer stderr: %s", res, lastLines(pr.stderr, 40))
	}
}

// failoverGo is the baseline row: client.Producer in process, with the same input.
func failoverGo(ctx context.Context, c *natscluster.Cluster, topic string, pr *producerRun, feed <-chan line) error {
	cl, err := client.Connect(ctx, client.Options{URL: c.ClientURLs(), Creds: c.Creds(), Timeout: 20 * time.Second, Name: "failover go"})
	if err != nil {
		return err
	}
	defer cl.Close()
	var logMu sync.Mutex
	var log bytes.Buffer
	p, err := cl.NewProducer(ctx, topic, client.ProducerOptions{ID: pr.id, Logf: func(f string, a ...any) {
		logMu.Lock()
		fmt.Fprintf(&log, f+"\n", a...)
		logMu.Unlock()
	}})
	if err != nil {
		return err
	}
	defer func() {
		logMu.Lock()
		pr.stderr = log.String()
		logMu.Unlock()
	}()
	for l := range feed {
		err := p.Send(ctx, client.Record{Key: l.key, NoKey: l.noKey, Value: []byte(l.value)}, func(r client.Result) {
			res := result{PSeq: r.ProducerSeq, Acked: r.Err == nil}
			if r.Err != nil {
				msg := r.Err.Error()
				res.Error = &msg
			}
			pr.mu.Lock()
			pr.results = append(pr.results, res)
			pr.mu.Unlock()
		})
		if err != nil {
			return err
		}
	}
	return p.Close(ctx)
}

// failoverSDK runs sdk/<lang>/produce against the cluster (every node's URL, comma-separated) with
// the input fed to its stdin as it comes.
func failoverSDK(ctx context.Context, c *natscluster.Cluster, dir, topic string, pr *producerRun, feed <-chan line) error {
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "produce"), "--server", c.ClientURLs(), "--creds", c.Creds(),
		"--topic", topic, "--producer-id", pr.id)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PCTL_PRODUCE_LOG=1") // the producer's decisions on stderr (SDKs that have it)
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
		var err error
		for l := range feed {
			if err == nil {
				_, err = io.WriteString(stdin, l.text())
			}
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
			return fmt.Errorf("sdk/%s/produce exited with %d", filepath.Base(dir), ee.ExitCode())
		}
		return err
	}
	return parseErr
}

// readStreamsFromLeader reads every partition stream in stream order from its leader
// ($JS.API.STREAM.MSG.GET; a direct get may be answered by a replica that lags), as deliveries of
// group "storage" ordered by (partition, stream sequence).
func readStreamsFromLeader(ctx context.Context, t *testing.T, c *natscluster.Cluster, topic string, partitions int) []verify.Delivered {
	t.Helper()
	nc, err := natsConnectNKey(c)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var out []verify.Delivered
	for q := 0; q < partitions; q++ {
		stream := wire.StreamName(topic, q)
		m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.INFO."+stream, nil)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			State struct {
				LastSeq uint64 `json:"last_seq"`
			} `json:"state"`
		}
		if err := json.Unmarshal(m.Data, &info); err != nil {
			t.Fatal(err)
		}
		msgs := make([]*leaderMsg, info.State.LastSeq+1)
		errs := make([]error, len(msgs))
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				msgs[seq], errs[seq] = msgFromLeader(ctx, nc, stream, seq)
			}()
		}
		wg.Wait()
		for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
			if errs[seq] != nil {
				t.Fatalf("%s message %d: %v", stream, seq, errs[seq])
			}
			lm := msgs[seq]
			if lm == nil || lm.hdr.Get(wire.HeaderFence) != "" {
				continue
			}
			d := verify.Delivered{Group: "storage", Order: int64(q)<<40 | int64(seq), Producer: lm.hdr.Get(wire.HeaderProducer)}
			d.PSeq, _ = strconv.ParseUint(lm.hdr.Get(wire.HeaderSeq), 10, 64)
			if k := lm.hdr.Get(wire.HeaderKey); k != "" {
				if d.Key, err = wire.DecodeKey(k); err != nil {
					t.Fatal(err)
				}
			} else {
				d.NoKey = true
			}
			out = append(out, d)
		}
	}
	return out
}

// natsConnectNKey connects with the cluster's NKey seed file.
func natsConnectNKey(c *natscluster.Cluster) (*nats.Conn, error) {
	opt, err := nats.NkeyOptionFromSeed(c.Creds())
	if err != nil {
		return nil, err
	}
	return nats.Connect(c.ClientURLs(), opt)
}

type leaderMsg struct {
	hdr  textproto.MIMEHeader
	data []byte
}

// msgFromLeader reads one message with $JS.API.STREAM.MSG.GET (nil when there is none), retrying
// while the stream has no leader for a moment.
func msgFromLeader(ctx context.Context, nc *nats.Conn, stream string, seq uint64) (*leaderMsg, error) {
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.MSG.GET."+stream, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`}`))
		cancel()
		if err == nil {
			var resp struct {
				Message *struct {
					Hdrs string `json:"hdrs"`
					Data string `json:"data"`
				} `json:"message"`
				Error *struct {
					ErrCode     int    `json:"err_code"`
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				return nil, err
			}
			switch {
			case resp.Error != nil && resp.Error.ErrCode == 10037:
				return nil, nil // no message (deleted)
			case resp.Error != nil:
				err = fmt.Errorf("%s (%d)", resp.Error.Description, resp.Error.ErrCode)
			case resp.Message == nil:
				err = errors.New("empty answer")
			default:
				raw, _ := base64.StdEncoding.DecodeString(resp.Message.Hdrs)
				data, _ := base64.StdEncoding.DecodeString(resp.Message.Data)
				lm := &leaderMsg{hdr: textproto.MIMEHeader{}, data: data}
				if len(raw) > 0 {
					tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
					if _, err := tp.ReadLine(); err != nil {
						return nil, err
					}
					h, err := tp.ReadMIMEHeader()
					if err != nil && !errors.Is(err, io.EOF) {
						return nil, err
					}
					lm.hdr = h
				}
				return lm, nil
			}
		}
		if attempt >= 20 || ctx.Err() != nil {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
