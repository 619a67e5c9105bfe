package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/testhook"
	"pctl.dev/pctl/plugins"
)

// serveOps runs `pctl serve args...` in-process like servePctl, and also returns its standard
// error as it grows (the log lines, the HTTP address).
func serveOps(t *testing.T, args ...string) (url, dir string, stderr *syncBuffer, stop func() cliResult) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout syncBuffer
	stderr = &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- runCtx(ctx, append([]string{"serve"}, args...), strings.NewReader(""), &stdout, stderr)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := readyRE.FindStringSubmatch(stdout.String()); m != nil {
			url, dir = m[1], m[2]
			break
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("pctl serve exited %d before it was ready\nstderr:\n%s", code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("pctl serve printed no ready line within 60s\nstderr:\n%s", stderr.String())
		}
	}
	stopped := false
	var res cliResult
	stop = func() cliResult {
		if !stopped {
			stopped = true
			cancel()
			res = cliResult{code: <-done, stdout: stdout.String(), stderr: stderr.String()}
		}
		return res
	}
	t.Cleanup(func() { stop() })
	return url, dir, stderr, stop
}

// TestServeTwiceOnOneDataDir: a second broker on a data directory in use fails at once, with a
// usage error naming the process that holds it; the first broker is untouched, and once it has
// stopped the directory is free again. (Before the lock both started and answered differently.)
func TestServeTwiceOnOneDataDir(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	url, dir, stop := servePctl(t, "--data", data, "--listen", "127.0.0.1:0")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // before the lock, it started and ran
	defer cancel()
	r := runCLI(ctx, nil, strings.NewReader(""), "serve", "--data", data, "--listen", "127.0.0.1:0")
	expect(t, r, exitUsage, "data directory in use", fmt.Sprintf("pid %d", os.Getpid()), "started ", "--data")
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the second serve took %v to fail", took)
	}
	expect(t, as(t, url, dir, broker.RoleAdmin).run("", "topic", "list"), exitOK)
	expect(t, stop(), exitOK, "stopped cleanly")
	_, _, stop = servePctl(t, "--data", data, "--listen", "127.0.0.1:0")
	expect(t, stop(), exitOK)
}

var httpAddrRE = regexp.MustCompile(`"msg":"http listening","addr":"([0-9.:]+)"`)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeHTTPAndLogs: --http serves health, readiness, metrics, the status JSON and the NATS
// monitoring; --log-format json makes every log line a JSON object, and each admin action and
// each epoch-change step is exactly one line with its fields.
func TestServeHTTPAndLogs(t *testing.T) {
	url, dir, stderr, stop := serveOps(t, "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0",
		"--http", "127.0.0.1:0", "--log-format", "json")
	m := httpAddrRE.FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no http listening line:\n%s", stderr.String())
	}
	base := "http://" + m[1]
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, base+path); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	admin := as(t, url, dir, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "orders", "--partitions", "3", "--partitioner", "jump"), exitOK)
	wasm, _ := plugins.TemplateModule("c")
	file := filepath.Join(t.TempDir(), "p.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	expect(t, admin.run("", "plugin", "upload", file), exitOK)
	expect(t, as(t, url, dir, broker.RoleProducer).run("a\t1\nb\t2\nc\t3\n", "produce", "orders", "--broker-side"), exitOK)
	expect(t, admin.run("", "topic", "expand", "orders", "--partitions", "5"), exitOK)

	code, body := httpGet(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`pctl_topic_epoch{topic="orders"} 2`,
		`pctl_topic_partitions{topic="orders"} 5`,
		`pctl_topic_epoch_records_total{epoch="1",topic="orders"} 3`,
		`pctl_produce_service_records_total{epoch="1",result="acked",topic="orders"} 3`,
		`pctl_epoch_change_step_duration_seconds_count{step="fence"} 1`,
		`pctl_admin_requests_total{code="ok",op="plugin.upload"} 1`,
		`pctl_plugin_call_keys_total{plugin="jump"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, grepLines(body, "pctl_"))
		}
	}
	code, body = httpGet(t, base+"/api/status")
	var st struct {
		Topics  []json.RawMessage `json:"topics"`
		Plugins []struct {
			Name   string `json:"name"`
			Report *struct {
				Passed bool `json:"passed"`
			} `json:"report"`
		} `json:"plugins"`
		Graphs map[string]string `json:"graphs"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("/api/status: %d %s", code, body)
	}
	reported := false
	for _, p := range st.Plugins {
		if p.Report != nil && p.Report.Passed {
			reported = true
		}
	}
	if len(st.Topics) != 1 || !reported || !strings.Contains(st.Graphs["orders"], "<svg") {
		t.Fatalf("/api/status: %d topics, an uploaded plugin's report: %v, graph: %.60q", len(st.Topics), reported, st.Graphs["orders"])
	}
	if code, body := httpGet(t, base+"/nats/varz"); code != 200 || !strings.Contains(body, `"server_name": "pctl"`) {
		t.Fatalf("/nats/varz: %d %.200s", code, body)
	}
	if code, body := httpGet(t, base+"/graph/orders.svg"); code != 200 || !strings.HasPrefix(body, "<svg") {
		t.Fatalf("/graph/orders.svg: %d %.100s", code, body)
	}

	r := stop()
	expect(t, r, exitOK)
	count := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(r.stderr))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		msg, _ := line["msg"].(string)
		if line["component"] == "nats" {
			count["nats"]++ // the embedded NATS server logs through the same logger
		}
		switch msg {
		case "topic created", "plugin uploaded", "epoch change planned", "epoch active":
			count[msg]++
		case "epoch change step":
			count[msg+" "+line["step"].(string)]++
		}
		if msg == "plugin uploaded" && line["verdict"] != "pass" {
			t.Fatalf("upload line without its verdict: %v", line)
		}
	}
	if count["nats"] == 0 {
		t.Fatalf("no log line of the embedded NATS server (component=nats):\n%s", r.stderr)
	}
	for _, k := range []string{"topic created", "plugin uploaded", "epoch change planned", "epoch change step create", "epoch change step fence", "epoch change step activate", "epoch active"} {
		if count[k] != 1 {
			t.Fatalf("%d log lines %q, want 1 (counts %v)\n%s", count[k], k, count, r.stderr)
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestTopicDescribeGraph: the graph of a live topic in the three formats, and a bad format.
func TestTopicDescribeGraph(t *testing.T) {
	url, dir, _ := servePctl(t, "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0")
	admin := as(t, url, dir, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "g", "--partitions", "2", "--partitioner", "jump"), exitOK)
	expect(t, admin.run("", "topic", "expand", "g", "--partitions", "3"), exitOK)
	// jump declares its ancestry: child 2 of 3 may hold keys of both old partitions.
	expect(t, admin.run("", "topic", "describe", "g", "--graph", "text"), exitOK, "epoch 2 (current): jump, 3 partitions; ancestry declared", "  0 <- 0\n", "  1 <- 1\n", "  2 <- 0-1\n")
	expect(t, admin.run("", "topic", "describe", "g", "--graph", "dot"), exitOK, "e1n0 -> e2n0", "e1n1 -> e2n2")
	r := admin.run("", "topic", "describe", "g", "--graph", "svg")
	expect(t, r, exitOK, `<svg xmlns="http://www.w3.org/2000/svg" class="ancestry" data-topic="g"`)
	expect(t, admin.run("", "topic", "describe", "g", "--graph", "png"), exitUsage, "--graph \"png\": give text, dot, svg")
	expect(t, admin.run("", "topic", "describe", "g", "--graph", "svg", "--json"), exitUsage, "exclude each other")
}

// TestProduceStallsOutWhenTheBrokerIsGone: with the broker stopped under it, produce reports the
// lost connection and gives up after --timeout without any acknowledgement, exit 1 (it used to
// wait silently).
func TestProduceStallsOutWhenTheBrokerIsGone(t *testing.T) {
	url, dir, stop := servePctl(t, "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0")
	admin := as(t, url, dir, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "s", "--partitions", "2", "--partitioner", "jump"), exitOK)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res := make(chan cliResult, 1)
	go func() {
		res <- runCLI(ctx, nil, pr, "produce", "s", "--timeout", "2s", "--verbose", "--server", url, "--creds", filepath.Join(dir, "admin.nk"))
	}()
	fmt.Fprintln(pw, "a\t1")
	time.Sleep(time.Second) // acknowledged by now
	expect(t, stop(), exitOK)
	fmt.Fprintln(pw, "b\t2")
	fmt.Fprintln(pw, "c\t3")
	pw.Close()
	start := time.Now()
	var r cliResult
	select {
	case r = <-res:
	case <-time.After(60 * time.Second):
		t.Fatal("produce still waits 60s after its broker stopped (--timeout 2s)")
	}
	expect(t, r, exitFailure, "connection lost", "no acknowledgement for 2s", "record(s) outstanding", "1 acknowledged")
	t.Logf("gave up %v after the input ended", time.Since(start).Round(time.Millisecond))
}

// TestPartitionStopsOnInterrupt: 'pctl partition' reading a pipe that has nothing more to give
// stops when interrupted (SIGINT/SIGTERM cancel the command's context), printing the partitions
// of the keys read so far. It used to ignore both signals.
func TestPartitionStopsOnInterrupt(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan cliResult, 1)
	go func() { res <- runCLI(ctx, nil, pr, "partition", "--plugin", "jump", "--partitions", "8") }()
	fmt.Fprintln(pw, "k1")
	fmt.Fprintln(pw, "k2")
	time.Sleep(300 * time.Millisecond) // both read; the pipe now blocks
	cancel()
	select {
	case r := <-res:
		expect(t, r, exitFailure, "interrupted after 2 keys")
		want := runCLI(context.Background(), nil, strings.NewReader(""), "partition", "--plugin", "jump", "--partitions", "8", "k1", "k2")
		if r.stdout != want.stdout {
			t.Fatalf("printed %q before stopping, want the partitions of k1 and k2: %q", r.stdout, want.stdout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pctl partition did not stop within 10s of the interrupt")
	}
}

// TestRepartitionOutlastsTheRequestTimeout: a change that takes longer than one broker request
// may (here 3 s against 1 s) is followed to its end through the descriptor, instead of failing
// with "the broker did not answer".
func TestRepartitionOutlastsTheRequestTimeout(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		Testing: testhook.Steps(func(topic, state string) error {
			if state == "created" {
				time.Sleep(3 * time.Second)
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := &pctlAs{t: t, url: b.ClientURL(), creds: b.CredsPath(broker.RoleAdmin)}
	expect(t, admin.run("", "topic", "create", "slow", "--partitions", "2", "--partitioner", "jump"), exitOK)
	admin.getenv = func(k string) string {
		if k == "PCTL_REQUEST_TIMEOUT" {
			return "1s"
		}
		return ""
	}
	r := admin.run("", "topic", "expand", "slow", "--partitions", "4")
	expect(t, r, exitOK, "epoch 2 active after", "following it")
}

// TestInterruptStopsEveryCommand: each command that can wait on its input or its work stops
// within seconds of SIGINT/SIGTERM (the command's context being cancelled), with a message that
// says it was interrupted. Inputs are pipes and FIFOs that never end.
func TestInterruptStopsEveryCommand(t *testing.T) {
	url, dir, _ := servePctl(t, "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0")
	admin := as(t, url, dir, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "i", "--partitions", "2", "--partitioner", "jump"), exitOK)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Hold the FIFO open for writing, so readers block on it instead of seeing its end.
	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			t.Cleanup(func() { f.Close() })
		}
	}()
	conn := []string{"--server", url, "--creds", filepath.Join(dir, "admin.nk")}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"partition", []string{"partition", "--plugin", "jump", "--partitions", "4"}, "interrupted"},
		{"produce", append([]string{"produce", "i"}, conn...), "interrupted"},
		{"consume", append([]string{"consume", "i", "--group", "g"}, conn...), "(interrupted)"},
		{"conformance", []string{"conformance", "jump", "--keys", "3000000"}, "interrupted"},
		{"ancestry", []string{"ancestry", "--plugin", "jump", "--from", "2", "--to", "3", "--keys", fifo}, "interrupted"},
		{"verify", []string{"verify", "--sent", fifo, "--expect-group", "g"}, "interrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr, pw := io.Pipe()
			defer pw.Close()
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan cliResult, 1)
			go func() { res <- runCLI(ctx, nil, pr, tc.args...) }()
			time.Sleep(time.Second)
			cancel()
			select {
			case r := <-res:
				if r.code == exitOK && tc.name != "consume" {
					t.Fatalf("exit 0 after an interrupt: %s", r)
				}
				expect(t, r, r.code, tc.want)
			case <-time.After(15 * time.Second):
				t.Fatalf("pctl %s still runs 15s after the interrupt", tc.name)
			}
		})
	}
}

// TestServeOpsFromConfigFile: the operations settings also come from --config.
func TestServeOpsFromConfigFile(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "serve.json")
	if err := os.WriteFile(cfg, []byte(`{"http": "127.0.0.1:0", "log_format": "json", "log_level": "warn"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, stderr, stop := serveOps(t, "--data", filepath.Join(t.TempDir(), "data"), "--listen", "127.0.0.1:0", "--config", cfg, "--log-level", "info")
	if !httpAddrRE.MatchString(stderr.String()) { // --log-level info on the command line wins over warn
		t.Fatalf("no JSON http listening line:\n%s", stderr.String())
	}
	expect(t, stop(), exitOK)
}

// TestRepartitionWaitsWhileTheChangeMoves: past the request timeout, 'topic expand' waits as
// long as the change makes progress (the broker's step progress events), gives up after --stall
// without progress and after --timeout in all, each saying that the change goes on in the broker.
// Before, it had no such bounds (and saw no progress within a step).
func TestRepartitionWaitsWhileTheChangeMoves(t *testing.T) {
	var slow atomic.Int64 // per-partition delay of the create and fence steps, in ms
	var stuck atomic.Bool // the "created" step hook blocks for 3.5 s
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		StreamOpsInFlight: 1,
		Testing: &testhook.Broker{Partition: func(topic, step string, q int) error {
			time.Sleep(time.Duration(slow.Load()) * time.Millisecond)
			return nil
		}, Step: func(topic, state string) error {
			if state == "created" && stuck.Load() {
				time.Sleep(3500 * time.Millisecond)
			}
			return nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := &pctlAs{t: t, url: b.ClientURL(), creds: b.CredsPath(broker.RoleAdmin)}
	expect(t, admin.run("", "topic", "create", "w", "--partitions", "4", "--partitioner", "jump"), exitOK)
	admin.getenv = func(k string) string {
		if k == "PCTL_REQUEST_TIMEOUT" {
			return "1s"
		}
		return ""
	}
	// 6 partitions created and 4 fenced at 600 ms each, one at a time: 6 s of steps, the
	// descriptor unchanged for 3.6 s (longer than --stall), progress every half second.
	slow.Store(600)
	start := time.Now()
	r := admin.run("", "topic", "expand", "w", "--partitions", "10", "--stall", "2500ms")
	expect(t, r, exitOK, "epoch 2 active after", "following it")
	if took := time.Since(start); took < 5*time.Second {
		t.Fatalf("the change took %v: too fast to have tested --stall against progress", took)
	}
	slow.Store(0)
	stuck.Store(true)
	r = admin.run("", "topic", "expand", "w", "--partitions", "12", "--stall", "1500ms")
	expect(t, r, exitFailure, "no progress for --stall 1.5s", "goes on in the broker")
	waitActive(t, admin, "w", 3)
	r = admin.run("", "topic", "expand", "w", "--partitions", "14", "--timeout", "2s", "--stall", "0")
	expect(t, r, exitFailure, "--timeout 2s passed", "goes on in the broker")
	waitActive(t, admin, "w", 4)
}

// waitActive waits until topic's current epoch is epoch, with no change in progress.
func waitActive(t *testing.T, admin *pctlAs, topic string, epoch int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := admin.run("", "topic", "describe", topic, "--json")
		var d wire.Topic
		if r.code == exitOK && json.Unmarshal([]byte(r.stdout), &d) == nil && d.Change == nil && d.Current().Epoch == epoch {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("epoch %d of %s not active: %s", epoch, topic, r)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
