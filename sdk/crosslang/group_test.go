package crosslang

// The cross-language consumer group (issue 13 item 4): one consumer group whose members are
// processes in four languages — Go (`pctl consume`), and every SDK's common consume command
// (sdk/<lang>/consume, which prints exactly what `pctl consume --format jsonl --timestamps`
// prints) — sharing the partitions of one topic while producers in the four languages
// (sdk/<lang>/produce and `pctl produce`) write to it, through a grow, a function swap and a
// shrink, a member killed with kill -9 and a member joining late; and the same group replaying
// everything after a reset (`pctl topic groups --reset`). Checked with `pctl verify` (every
// acknowledged record delivered, per-key order of first deliveries across all members), that
// duplicates come only from the killed member, and that every record was delivered from the
// partition its epoch's module gives its key (client.Partitioner: the semantics of
// `pctl partition`).
//
// An SDK takes part when it has executable setup, produce and consume files and its setup
// succeeds. With PCTL_REQUIRE_TOOLCHAINS=1 (CI) the java, node and python SDKs must all take
// part; otherwise the test runs with the languages it has and says loudly which ones took part.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

var (
	setupOnce    sync.Once
	setupReady   []sdk
	setupBroken  map[string]string
	pctlOnce     sync.Once
	pctlBin      string
	pctlBuildErr error
)

// setupCached runs every SDK's setup once per test binary (the tests of this package share it).
func setupCached(t *testing.T, found []sdk) ([]sdk, map[string]string) {
	setupOnce.Do(func() { setupReady, setupBroken = setupAll(t, found) })
	broken := map[string]string{}
	for k, v := range setupBroken {
		broken[k] = v
	}
	return setupReady, broken
}

// pctlBinary builds cmd/pctl once (the Go member and producer are processes like the others).
func pctlBinary(t *testing.T) string {
	pctlOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pctl-crosslang-bin-")
		if err != nil {
			pctlBuildErr = err
			return
		}
		pctlBin = filepath.Join(dir, "pctl")
		cmd := exec.Command("go", "build", "-o", pctlBin, "pctl.dev/pctl/cmd/pctl")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			pctlBuildErr = fmt.Errorf("go build ./cmd/pctl: %v: %s", err, stderr.String())
		}
	})
	if pctlBuildErr != nil {
		t.Fatal(pctlBuildErr)
	}
	return pctlBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pctlBin != "" {
		os.RemoveAll(filepath.Dir(pctlBin))
	}
	os.Exit(code)
}

// groupLanguages returns the SDKs whose consume command takes part, after saying loudly which
// languages take part in the group (Go always does: `pctl consume`).
func groupLanguages(t *testing.T) []sdk {
	found, broken := discover(t)
	ready, failed := setupCached(t, found)
	for k, v := range failed {
		broken[k] = v
	}
	var sdks []sdk
	for _, s := range ready {
		fi, err := os.Stat(filepath.Join(s.dir, "consume"))
		switch {
		case err != nil:
			broken[s.name] = "no consume file (the common consume command, issue 13 item 7)"
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			broken[s.name] = "consume is not an executable file"
		default:
			sdks = append(sdks, s)
		}
	}
	langs := []string{"go"}
	have := map[string]bool{"go": true}
	for _, s := range sdks {
		langs = append(langs, s.name)
		have[s.name] = true
	}
	t.Logf("GROUP MEMBERS AND PRODUCERS IN: %s", strings.Join(langs, ", "))
	var missing []string
	for _, r := range required {
		if !have[r] {
			why := broken[r]
			if why == "" {
				why = "no directory sdk/" + r
			}
			missing = append(missing, "sdk/"+r+": "+why)
		}
	}
	if len(missing) > 0 {
		if requireToolchains() {
			for _, m := range missing {
				t.Errorf("required language missing from the group (PCTL_REQUIRE_TOOLCHAINS=1): %s", m)
			}
			t.FailNow()
		}
		t.Logf("LANGUAGES MISSING FROM THE GROUP: %s. This run does not check them (with PCTL_REQUIRE_TOOLCHAINS=1 it fails)", strings.Join(missing, "; "))
	}
	return sdks
}

// outLine is one line of a member's output (pctl consume --format jsonl --timestamps).
type outLine struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	Epoch     int     `json:"epoch"`
	Seq       uint64  `json:"seq"`
	Key       *string `json:"key"`
	KeyB64    *string `json:"key_b64"`
	Value     *string `json:"value"`
	Producer  string  `json:"producer"`
	PSeq      uint64  `json:"pseq"`
	TS        int64   `json:"ts"`
}

func (l outLine) key() ([]byte, bool) {
	switch {
	case l.Key != nil:
		return []byte(*l.Key), true
	case l.KeyB64 != nil:
		k, _ := base64.StdEncoding.DecodeString(*l.KeyB64)
		return k, true
	}
	return nil, false
}

// memberProc is one group member in its own process, writing its records to a file.
type memberProc struct {
	lang, name string
	cmd        *exec.Cmd
	outPath    string
	errPath    string
	out, errf  *os.File
	exited     chan struct{}
	waitErr    error
}

func startGroupMember(t *testing.T, dir string, b *broker.Broker, s *sdk, topic, group, name string) *memberProc {
	t.Helper()
	creds := b.CredsPath(broker.RoleConsumer)
	var cmd *exec.Cmd
	lang := "go"
	if s == nil {
		cmd = exec.Command(pctlBinary(t), "consume", topic, "--group", group, "--member", name, "--from-beginning", "--format", "jsonl", "--timestamps",
			"--heartbeat", "300ms", "--server", b.ClientURL(), "--creds", creds)
	} else {
		lang = s.name
		cmd = exec.Command(filepath.Join(s.dir, "consume"), "--server", b.ClientURL(), "--creds", creds, "--topic", topic, "--group", group,
			"--member", name, "--from-beginning", "--heartbeat", "300ms")
		cmd.Dir = s.dir
	}
	m := &memberProc{lang: lang, name: name, cmd: cmd, outPath: filepath.Join(dir, name+".jsonl"), errPath: filepath.Join(dir, name+".err"), exited: make(chan struct{})}
	var err error
	if m.out, err = os.Create(m.outPath); err != nil {
		t.Fatal(err)
	}
	if m.errf, err = os.Create(m.errPath); err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = m.out, m.errf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s member %s: %v", lang, name, err)
	}
	go func() {
		m.waitErr = cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() { m.kill(syscall.SIGKILL) })
	return m
}

// kill sends sig and waits for the process (SIGTERM: the member commits and leaves).
func (m *memberProc) kill(sig syscall.Signal) {
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(sig)
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	m.out.Close()
	m.errf.Close()
}

func (m *memberProc) alive() bool {
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// lines returns the member's complete output lines so far (a line cut by kill -9 is left out).
func (m *memberProc) lines(t *testing.T) []outLine {
	b, err := os.ReadFile(m.outPath)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	var out []outLine
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) == 0 {
			continue
		}
		var o outLine
		if err := json.Unmarshal(l, &o); err != nil {
			t.Errorf("member %s: output line %q: %v", m.name, l, err)
			continue
		}
		out = append(out, o)
	}
	return out
}

func (m *memberProc) stderr() string {
	b, _ := os.ReadFile(m.errPath)
	return lastLines(string(b), 8)
}

// cleanCopy writes the member's complete lines to a file of their own (for pctl verify).
func (m *memberProc) cleanCopy(t *testing.T, dir string) string {
	b, err := os.ReadFile(m.outPath)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	p := filepath.Join(dir, m.name+".complete.jsonl")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// producerProc is one producer process, fed its input in phases.
type producerProc struct {
	lang, id string
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	w        *bufio.Writer
	logPath  string // pctl produce --log; for the SDKs, written from their results
	sentKeys []line // what it was given, in order (pseq = index + 1)
	mu       sync.Mutex
	results  []result // the SDKs' results (stdout)
	stderr   bytes.Buffer
	exited   chan struct{}
	waitErr  error
}

func startProducer(t *testing.T, dir string, b *broker.Broker, s *sdk, topic string) *producerProc {
	t.Helper()
	creds := b.CredsPath(broker.RoleProducer)
	p := &producerProc{exited: make(chan struct{})}
	if s == nil {
		p.lang, p.id = "go", "go-producer"
		p.logPath = filepath.Join(dir, "sent-go.jsonl")
		p.cmd = exec.Command(pctlBinary(t), "produce", topic, "--producer-id", p.id, "--log", p.logPath, "--server", b.ClientURL(), "--creds", creds)
	} else {
		p.lang, p.id = s.name, s.name+"-producer"
		p.logPath = filepath.Join(dir, "sent-"+s.name+".jsonl")
		p.cmd = exec.Command(filepath.Join(s.dir, "produce"), "--server", b.ClientURL(), "--creds", creds, "--topic", topic, "--producer-id", p.id)
		p.cmd.Dir = s.dir
	}
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
		t.Fatalf("start %s producer: %v", p.lang, err)
	}
	p.w = bufio.NewWriter(p.stdin)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var r result
			if s != nil && json.Unmarshal(sc.Bytes(), &r) == nil {
				p.mu.Lock()
				p.results = append(p.results, r)
				p.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *producerProc) send(t *testing.T, ls []line) {
	t.Helper()
	for _, l := range ls {
		if _, err := p.w.WriteString(l.text()); err != nil {
			t.Fatalf("%s producer: write its input: %v; stderr: %s", p.lang, err, lastLines(p.stderr.String(), 5))
		}
	}
	if err := p.w.Flush(); err != nil {
		t.Fatalf("%s producer: write its input: %v", p.lang, err)
	}
	p.sentKeys = append(p.sentKeys, ls...)
}

// progress is how many of its records the producer has reported on (roughly, for pctl produce,
// whose log is buffered).
func (p *producerProc) progress() int {
	if p.lang == "go" {
		b, _ := os.ReadFile(p.logPath)
		return bytes.Count(b, []byte("\n"))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.results)
}

// finish closes the input, waits for the producer and writes its sent log (pctl verify --sent).
func (p *producerProc) finish(t *testing.T) {
	t.Helper()
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("%s producer did not finish; stderr: %s", p.lang, lastLines(p.stderr.String(), 10))
	}
	if p.waitErr != nil {
		t.Errorf("%s producer: %v; stderr: %s", p.lang, p.waitErr, lastLines(p.stderr.String(), 10))
	}
	if p.lang == "go" {
		return
	}
	var buf bytes.Buffer
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.results {
		if r.PSeq < 1 || int(r.PSeq) > len(p.sentKeys) {
			t.Errorf("%s producer: result for pseq %d of %d lines", p.lang, r.PSeq, len(p.sentKeys))
			continue
		}
		l := p.sentKeys[r.PSeq-1]
		e := map[string]any{"producer": p.id, "pseq": r.PSeq, "acked": r.Acked}
		if l.noKey {
			e["nokey"] = true
		} else {
			e["key"] = l.key
		}
		b, _ := json.Marshal(e)
		buf.Write(append(b, '\n'))
	}
	if len(p.results) != len(p.sentKeys) {
		t.Errorf("%s producer: %d results for %d lines", p.lang, len(p.results), len(p.sentKeys))
	}
	if err := os.WriteFile(p.logPath, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// phaseLines are one phase's input lines of one producer: every key once, in key order, with a
// value that counts up (per producer) across phases. Values are padded to 600 bytes: the Python
// SDK's produce command reads its input 64 KiB at a time, so a phase must be more than that for
// it to send the phase's records before the next phase comes.
func phaseLines(phase, keys int) []line {
	out := make([]line, 0, keys+1)
	pad := strings.Repeat(".", 600)
	for k := 0; k < keys; k++ {
		out = append(out, line{key: []byte(fmt.Sprintf("key-%03d", k)), value: fmt.Sprintf("%d-%d-%s", phase, k, pad)})
	}
	out = append(out, line{noKey: true, value: fmt.Sprintf("keyless-%d", phase)})
	return out
}

// liveMembers asks the broker who is in the group.
func liveMembers(ctx context.Context, c *client.Client, topic, group string) []string {
	gs, err := c.Groups(ctx, topic)
	if err != nil {
		return nil
	}
	for _, g := range gs {
		if g.Group == group {
			return g.Members
		}
	}
	return nil
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, detail func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", d, what, detail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// verifyReport is what `pctl verify --json` prints (the parts this test reads).
type verifyReport struct {
	Failures []string `json:"failures"`
	Groups   []struct {
		Group      string   `json:"group"`
		Acked      int      `json:"acked"`
		Distinct   int      `json:"distinct"`
		Lost       int      `json:"lost"`
		Violations int      `json:"violations"`
		Duplicates int      `json:"duplicates"`
		Unexpected int      `json:"unexpected"`
		Failures   []string `json:"failures"`
		Examples   []string `json:"examples"`
	} `json:"groups"`
}

// pctlVerify runs `pctl verify` and returns its exit status and report.
func pctlVerify(t *testing.T, sentFiles []string, group string, delivered []string, extra ...string) (int, verifyReport, string) {
	t.Helper()
	args := []string{"verify", "--json", "--expect-group", group}
	for _, f := range sentFiles {
		args = append(args, "--sent", f)
	}
	for _, f := range delivered {
		args = append(args, "--delivered", group+"="+f)
	}
	args = append(args, extra...)
	cmd := exec.Command(pctlBinary(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep verifyReport
	if code != 2 {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("pctl verify --json: %v: %s %s", err, stdout.String(), stderr.String())
		}
	}
	return code, rep, stdout.String() + stderr.String()
}

// TestGroupAcrossLanguages: members in every language share one group through a grow, a
// function swap, a shrink, a kill -9 and a late join, while producers in every language write.
func TestGroupAcrossLanguages(t *testing.T) {
	sdks := groupLanguages(t)
	bin := pctlBinary(t)
	_ = bin
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	const topic, group, keys = "xg", "mixed", 120
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()

	// One member per language at the start; the victim of kill -9 is the second language's
	// (an SDK's, when there is one); Go's second member joins late.
	var members []*memberProc
	members = append(members, startGroupMember(t, dir, b, nil, topic, group, "go-1"))
	for i := range sdks {
		members = append(members, startGroupMember(t, dir, b, &sdks[i], topic, group, sdks[i].name+"-1"))
	}
	waitUntil(t, 90*time.Second, "every member in the group", func() bool {
		return len(liveMembers(ctx, admin, topic, group)) == len(members)
	}, func() string {
		return fmt.Sprintf("live %v; stderr: %s", liveMembers(ctx, admin, topic, group), allStderr(members))
	})
	victim := members[len(members)-1]
	if len(members) > 2 {
		victim = members[1]
	}

	producers := []*producerProc{startProducer(t, dir, b, nil, topic)}
	for i := range sdks {
		producers = append(producers, startProducer(t, dir, b, &sdks[i], topic))
	}
	sentSoFar := 0
	phase := func(n int) {
		ls := phaseLines(n, keys)
		for _, p := range producers {
			p.send(t, ls)
		}
		sentSoFar += len(ls)
	}
	// Each epoch change waits until the group has delivered most of what every producer was
	// given (so every producer has records in every epoch; the SDKs' produce commands buffer their
	// reports, the members' outputs show progress at once), then comes while the next phase's
	// records are being sent.
	deliveredOf := func() map[string]int {
		seen := map[string]bool{}
		n := map[string]int{}
		for _, m := range members {
			for _, l := range m.lines(t) {
				if k := fmt.Sprint(l.Producer, "/", l.PSeq); !seen[k] {
					seen[k] = true
					n[l.Producer]++
				}
			}
		}
		return n
	}
	caughtUp := func() {
		waitUntil(t, 2*time.Minute, "the group to deliver most of every producer's records", func() bool {
			got := deliveredOf()
			for _, p := range producers {
				if got[p.id] < sentSoFar*3/4 {
					return false
				}
			}
			return true
		}, func() string {
			got := deliveredOf()
			var s []string
			for _, p := range producers {
				s = append(s, fmt.Sprintf("%s %d/%d (%s)", p.lang, got[p.id], sentSoFar, lastLines(p.stderr.String(), 2)))
			}
			return strings.Join(s, "; ") + "; members: " + allStderr(members)
		})
	}
	change := func(what string, req wire.RepartitionRequest) {
		req.Topic = topic
		start := time.Now()
		if _, err := admin.Repartition(ctx, req); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s in %v", what, time.Since(start).Round(time.Millisecond))
	}

	phase(1)
	caughtUp()
	phase(2)
	change("grow 4 -> 6", wire.RepartitionRequest{Partitions: 6})
	caughtUp()
	waitUntil(t, time.Minute, "the victim to deliver", func() bool { return len(victim.lines(t)) > 0 }, victim.stderr)
	victimLines := len(victim.lines(t))
	victim.kill(syscall.SIGKILL)
	t.Logf("killed %s member %s (kill -9) after %d deliveries", victim.lang, victim.name, victimLines)
	phase(3)
	change("function swap to librdkafka-consistent", wire.RepartitionRequest{Partitioner: "librdkafka-consistent"})
	caughtUp()
	late := startGroupMember(t, dir, b, nil, topic, group, "go-2")
	members = append(members, late)
	phase(4)
	change("shrink 6 -> 3", wire.RepartitionRequest{Partitions: 3})
	caughtUp()
	phase(5)
	for _, p := range producers {
		p.finish(t)
	}
	var sentFiles []string
	acked := map[string]bool{}
	for _, p := range producers {
		sentFiles = append(sentFiles, p.logPath)
		f, err := os.ReadFile(p.logPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range bytes.Split(f, []byte("\n")) {
			var s struct {
				Producer string `json:"producer"`
				PSeq     uint64 `json:"pseq"`
				Acked    bool   `json:"acked"`
			}
			if json.Unmarshal(l, &s) == nil && s.Acked {
				acked[fmt.Sprint(s.Producer, "/", s.PSeq)] = true
			}
		}
	}
	if len(acked) != len(producers)*sentSoFar {
		t.Errorf("%d records acknowledged of %d sent", len(acked), len(producers)*sentSoFar)
	}
	delivered := func() int {
		n := 0
		seen := map[string]bool{}
		for _, m := range members {
			for _, l := range m.lines(t) {
				k := fmt.Sprint(l.Producer, "/", l.PSeq)
				if acked[k] && !seen[k] {
					seen[k] = true
					n++
				}
			}
		}
		return n
	}
	waitUntil(t, 2*time.Minute, "every acknowledged record delivered", func() bool { return delivered() >= len(acked) }, func() string {
		return fmt.Sprintf("%d of %d delivered; stderr: %s", delivered(), len(acked), allStderr(members))
	})
	time.Sleep(time.Second) // duplicates, if any, would show now
	for _, m := range members {
		if m != victim {
			if !m.alive() {
				t.Errorf("%s member %s exited early: %v; stderr: %s", m.lang, m.name, m.waitErr, m.stderr())
			}
			m.kill(syscall.SIGTERM)
		}
	}

	// Who took part, loudly.
	byLang := map[string]int{}
	for _, m := range members {
		n := len(m.lines(t))
		byLang[m.lang] += n
		t.Logf("member %s (%s): %d deliveries", m.name, m.lang, n)
		if n == 0 {
			t.Errorf("member %s (%s) delivered nothing: it did not take part; stderr: %s", m.name, m.lang, m.stderr())
		}
	}
	var took []string
	for _, m := range members {
		took = append(took, fmt.Sprintf("%s=%d", m.name, len(m.lines(t))))
	}
	t.Logf("LANGUAGES THAT TOOK PART IN THE GROUP: %v (deliveries per member: %s)", keysOf(byLang), strings.Join(took, ", "))

	// pctl verify: every acknowledged record delivered, per-key order of first deliveries, no
	// record that was not sent.
	var files []string
	for _, m := range members {
		files = append(files, m.cleanCopy(t, dir))
	}
	code, rep, out := pctlVerify(t, sentFiles, group, files)
	if code != 0 {
		t.Errorf("pctl verify failed (exit %d): %s", code, out)
	}
	for _, g := range rep.Groups {
		t.Logf("pctl verify: group %s: %d acknowledged, %d distinct delivered, %d lost, %d order violations, %d duplicates, %d unexpected",
			g.Group, g.Acked, g.Distinct, g.Lost, g.Violations, g.Duplicates, g.Unexpected)
	}

	// Duplicates only after the crash: each is a record the killed member delivered first.
	first := map[string]string{}
	type del struct {
		member string
		l      outLine
	}
	var all []del
	for _, m := range members {
		for _, l := range m.lines(t) {
			all = append(all, del{m.name, l})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].l.TS < all[j].l.TS })
	dups := 0
	for _, d := range all {
		k := fmt.Sprint(d.l.Producer, "/", d.l.PSeq)
		if f, ok := first[k]; ok {
			dups++
			if f != victim.name {
				t.Errorf("record %s delivered again (by %s) though its first delivery was by %s, which did not crash", k, d.member, f)
			}
			continue
		}
		first[k] = d.member
	}
	t.Logf("%d duplicate deliveries, all of records the killed member %s had delivered first", dups, victim.name)

	// Placement: every record came from the partition its epoch's module gives its key.
	desc, _, err := admin.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(desc.Epochs) != 4 {
		t.Fatalf("topic has %d epochs, want 4 (grow, swap, shrink)", len(desc.Epochs))
	}
	part := partitionFunc(t, ctx, admin, desc)
	wrong := 0
	epochs := map[int]bool{}
	for _, d := range all {
		epochs[d.l.Epoch] = true
		k, keyed := d.l.key()
		if !keyed {
			continue
		}
		if want := part(d.l.Epoch, k); d.l.Partition != want {
			if wrong++; wrong <= 3 {
				t.Errorf("member %s: key %q of epoch %d delivered from partition %d; the epoch's module says %d", d.member, k, d.l.Epoch, d.l.Partition, want)
			}
		}
	}
	if len(epochs) != 4 {
		t.Errorf("records of epochs %v delivered; want all four", keysOfInt(epochs))
	}
	// Each producer's records span the epochs.
	for _, p := range producers {
		pe := map[int]bool{}
		for _, d := range all {
			if d.l.Producer == p.id {
				pe[d.l.Epoch] = true
			}
		}
		if len(pe) < 3 {
			t.Errorf("%s producer's records are in epochs %v only; the changes should have come while it wrote", p.lang, keysOfInt(pe))
		}
	}
	if late := len(late.lines(t)); late == 0 {
		t.Errorf("the late member delivered nothing")
	}
}

// TestGroupResetAcrossLanguages: members in every language drain a topic whose backlog spans a
// grow; `pctl topic groups --reset earliest` moves the group back; every member follows and the
// group delivers everything again, once, in key order across the members (their gates closed
// again, in every language).
func TestGroupResetAcrossLanguages(t *testing.T) {
	sdks := groupLanguages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	admin := connect(t, b, broker.RoleAdmin)
	const topic, group, keys = "xr", "reset", 60
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 2, Partitioner: "kafka-murmur2"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startProducer(t, dir, b, nil, topic)
	total := 0
	for i := 0; i < 30; i++ {
		ls := phaseLines(i, keys)
		p.send(t, ls)
		total += len(ls)
	}
	waitUntil(t, time.Minute, "the first epoch produced", func() bool { return p.progress() >= total*3/4 }, func() string { return p.stderr.String() })
	time.Sleep(500 * time.Millisecond)
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 5}); err != nil {
		t.Fatal(err)
	}
	for i := 30; i < 33; i++ {
		ls := phaseLines(i, keys)
		p.send(t, ls)
		total += len(ls)
	}
	p.finish(t)

	members := []*memberProc{startGroupMember(t, dir, b, nil, topic, group, "go-1")}
	for i := range sdks {
		members = append(members, startGroupMember(t, dir, b, &sdks[i], topic, group, sdks[i].name+"-1"))
	}
	distinct := func(from map[string]int) int {
		seen := map[string]bool{}
		for _, m := range members {
			ls := m.lines(t)
			for _, l := range ls[from[m.name]:] {
				seen[fmt.Sprint(l.Producer, "/", l.PSeq)] = true
			}
		}
		return len(seen)
	}
	waitUntil(t, 2*time.Minute, "the first pass", func() bool { return distinct(map[string]int{}) >= total }, func() string {
		return fmt.Sprintf("%d of %d; stderr: %s", distinct(map[string]int{}), total, allStderr(members))
	})
	waitUntil(t, 30*time.Second, "every member in the group", func() bool {
		return len(liveMembers(ctx, admin, topic, group)) == len(members)
	}, func() string { return fmt.Sprint(liveMembers(ctx, admin, topic, group)) })
	time.Sleep(time.Second)
	mark := map[string]int{}
	for _, m := range members {
		mark[m.name] = len(m.lines(t))
	}
	cmd := exec.Command(pctlBinary(t), "topic", "groups", topic, "--group", group, "--reset", "earliest", "--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleConsumer))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pctl topic groups --reset: %v: %s", err, out)
	} else {
		t.Logf("%s", bytes.TrimSpace(out))
	}
	waitUntil(t, 2*time.Minute, "the replay", func() bool { return distinct(mark) >= total }, func() string {
		return fmt.Sprintf("%d of %d; stderr: %s", distinct(mark), total, allStderr(members))
	})
	time.Sleep(time.Second)
	var files []string
	took := map[string]int{}
	for _, m := range members {
		m.kill(syscall.SIGTERM)
		ls := m.lines(t)
		took[m.lang] += len(ls) - mark[m.name]
		var buf bytes.Buffer
		for _, l := range ls[mark[m.name]:] {
			bl, _ := json.Marshal(l)
			buf.Write(append(bl, '\n'))
		}
		f := filepath.Join(dir, m.name+".replay.jsonl")
		if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	t.Logf("LANGUAGES THAT TOOK PART IN THE REPLAY (deliveries after the reset): %v", took)
	for lang, n := range took {
		if n == 0 {
			t.Errorf("the %s member delivered nothing after the reset", lang)
		}
	}
	code, rep, out := pctlVerify(t, []string{p.logPath}, group, files, "--no-duplicates")
	if code != 0 {
		t.Errorf("the replay after the reset: pctl verify failed (exit %d): %s", code, out)
	}
	for _, g := range rep.Groups {
		t.Logf("pctl verify (replay): %d acknowledged, %d distinct, %d lost, %d order violations, %d duplicates", g.Acked, g.Distinct, g.Lost, g.Violations, g.Duplicates)
	}
}

func allStderr(ms []*memberProc) string {
	var s []string
	for _, m := range ms {
		s = append(s, m.name+": "+m.stderr())
	}
	return strings.Join(s, " || ")
}

func keysOf(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func keysOfInt(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}
