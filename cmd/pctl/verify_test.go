package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
)

// TestVerifyRoundTrip: produce with --log, consume with jsonl, verify: OK. Then a doctored
// delivery file (two records of one key swapped, one record dropped) must fail with both named.
func TestVerifyRoundTrip(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Start(context.Background(), broker.Config{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	conn := []string{"--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleAdmin)}
	run := func(stdin string, args ...string) (string, string, int) {
		var out, errb strings.Builder
		code := runCtx(context.Background(), append(args, conn...), strings.NewReader(stdin), &out, &errb)
		return out.String(), errb.String(), code
	}
	if _, e, code := run("", "topic", "create", "v", "--partitions", "3", "--partitioner", "kafka-murmur2"); code != 0 {
		t.Fatal(e)
	}
	var in strings.Builder
	for i := 0; i < 60; i++ {
		fmt.Fprintf(&in, "k%d\tv%d\n", i%5, i)
	}
	sent := filepath.Join(dir, "sent.jsonl")
	if _, e, code := run(in.String(), "produce", "v", "--log", sent); code != 0 {
		t.Fatal(e)
	}
	got, e, code := run("", "consume", "v", "--group", "g", "--from-beginning", "--format", "jsonl", "--idle-exit", "1s", "--heartbeat", "100ms")
	if code != 0 {
		t.Fatal(e)
	}
	deliv := filepath.Join(dir, "got.jsonl")
	os.WriteFile(deliv, []byte(got), 0o644)
	out, e, code := runVerify("--sent", sent, "--delivered", "g="+deliv)
	if code != 0 || !strings.Contains(out, "0 lost, 0 order violations") {
		t.Fatalf("verify of a correct run: exit %d\n%s%s", code, out, e)
	}
	// Doctor it: swap the first two lines of key k0 and drop the last line.
	lines := strings.Split(strings.TrimSpace(got), "\n")
	var k0 []int
	for i, l := range lines {
		if strings.Contains(l, `"key":"k0"`) {
			k0 = append(k0, i)
		}
	}
	lines[k0[0]], lines[k0[1]] = lines[k0[1]], lines[k0[0]]
	lines = lines[:len(lines)-1]
	os.WriteFile(deliv, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	out, _, code = runVerify("--sent", sent, "--delivered", "g="+deliv)
	if code != 1 || !strings.Contains(out, "1 lost, 1 order violations") {
		t.Fatalf("verify of a doctored run: exit %d\n%s", code, out)
	}
	_ = time.Second
}

// TestVerifyFails: pctl verify exits 1 on every wrong outcome, each reported as its own kind,
// and 0 on the right ones. The files are in the formats of 'pctl produce --log' (keys base64)
// and 'pctl consume --format jsonl'. On the old checker the cases marked (was 0) exited 0.
func TestVerifyFails(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// "YQ==" is "a", "Yg==" is "b".
	sent := file("sent.jsonl",
		`{"producer":"p","pseq":1,"key":"YQ==","acked":true}`,
		`{"producer":"p","pseq":2,"key":"Yg==","acked":true}`,
		`{"producer":"p","pseq":3,"key":"YQ==","acked":true}`,
		`{"producer":"p","pseq":4,"nokey":true,"acked":true}`,
		`{"producer":"p","pseq":5,"key":"YQ==","acked":false,"error":"timeout"}`)
	reused := file("reused.jsonl",
		`{"producer":"p","pseq":1,"key":"YQ==","acked":true}`,
		`{"producer":"p","pseq":2,"key":"Yg==","acked":true}`,
		`{"producer":"p","pseq":3,"key":"YQ==","acked":true}`,
		`{"producer":"p","pseq":3,"key":"Yg==","acked":true}`,
		`{"producer":"p","pseq":4,"nokey":true,"acked":true}`)
	rec := func(pseq int, key string) string {
		if key == "-" {
			return fmt.Sprintf(`{"topic":"t","partition":0,"epoch":1,"seq":%d,"value":"v","producer":"p","pseq":%d}`, pseq, pseq)
		}
		return fmt.Sprintf(`{"topic":"t","partition":0,"epoch":1,"seq":%d,"key":%q,"value":"v","producer":"p","pseq":%d}`, pseq, key, pseq)
	}
	good := file("good.jsonl", rec(1, "a"), rec(2, "b"), rec(3, "a"), rec(4, "-"))
	empty := file("empty.jsonl")
	wrongKey := file("wrongkey.jsonl", rec(1, "a"), rec(2, "a"), rec(3, "a"), rec(4, "-"))
	keyedKeyless := file("keyed.jsonl", rec(1, "a"), rec(2, "b"), rec(3, "a"), rec(4, ""))
	phantom := file("phantom.jsonl", rec(1, "a"), rec(2, "b"), rec(3, "a"), rec(4, "-"), rec(9, "a"))
	stranger := file("stranger.jsonl", rec(1, "a"), rec(2, "b"), rec(3, "a"), rec(4, "-"),
		`{"topic":"t","partition":0,"epoch":1,"seq":9,"key":"a","value":"v","producer":"other","pseq":1}`)
	dup := file("dup.jsonl", rec(1, "a"), rec(2, "b"), rec(1, "a"), rec(3, "a"), rec(4, "-"))
	unacked := file("unacked.jsonl", rec(1, "a"), rec(2, "b"), rec(3, "a"), rec(4, "-"), rec(5, "a"))
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"correct", []string{"--sent", sent, "--delivered", "g=" + good}, 0, []string{"group g: ", "0 lost", ": OK", "\nOK"}},
		{"an unacknowledged record may be delivered", []string{"--sent", sent, "--delivered", "g=" + unacked}, 0, []string{"1 unacknowledged delivered"}},
		{"empty group (was 0)", []string{"--sent", sent, "--delivered", "g=" + empty}, 1, []string{"group g: ", "0 deliveries", "4 lost", "delivered nothing", "FAILED: lost"}},
		{"expected group missing", []string{"--sent", sent, "--delivered", "g=" + good, "--expect-group", "late"}, 1, []string{"group late: ", "4 lost", "FAILED: lost"}},
		{"expected group alone", []string{"--sent", sent, "--expect-group", "late"}, 1, []string{"group late: ", "4 lost"}},
		{"wrong key (was 0)", []string{"--sent", sent, "--delivered", "g=" + wrongKey}, 1, []string{"1 wrong keys", `sent with key "b" and delivered with key "a"`, "FAILED: wrong-key"}},
		{"keyless record delivered with a key (was 0)", []string{"--sent", sent, "--delivered", "g=" + keyedKeyless}, 1, []string{"1 wrong keys", "FAILED: wrong-key"}},
		{"reused sequence (was 0)", []string{"--sent", reused, "--delivered", "g=" + good}, 1, []string{"1 reused", "used sequence 3 for more than one record", "FAILED: reused-seq"}},
		{"the same log twice", []string{"--sent", sent, "--sent", sent, "--delivered", "g=" + good}, 1, []string{"5 reused", "FAILED: reused-seq"}},
		{"phantom record (was 0)", []string{"--sent", sent, "--delivered", "g=" + phantom}, 1, []string{"1 unexpected", "no sent log contains it", "FAILED: unexpected"}},
		{"partial logs still catch a known producer's phantom", []string{"--sent", sent, "--delivered", "g=" + phantom, "--partial-logs"}, 1, []string{"1 unexpected"}},
		{"unknown producer (was 0)", []string{"--sent", sent, "--delivered", "g=" + stranger}, 1, []string{"1 unexpected", "FAILED: unexpected"}},
		{"unknown producer with partial logs", []string{"--sent", sent, "--delivered", "g=" + stranger, "--partial-logs"}, 0, []string{"1 from producers without a log", "\nOK"}},
		{"duplicates are counted", []string{"--sent", sent, "--delivered", "g=" + dup}, 0, []string{"1 duplicates"}},
		{"duplicates fail with --no-duplicates", []string{"--sent", sent, "--delivered", "g=" + dup, "--no-duplicates"}, 1, []string{"1 duplicates", "FAILED: duplicates"}},
		{"several outputs need timestamps", []string{"--sent", sent, "--delivered", "g=" + good, "--delivered", "g=" + good}, 2, nil},
		{"no delivered file and no expected group", []string{"--sent", sent}, 2, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runVerify(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout does not say %q:\n%s", w, out)
				}
			}
		})
	}
	// --json: every count, for scripts.
	out, _, code := runVerify("--sent", sent, "--delivered", "g="+wrongKey, "--expect-group", "late", "--json")
	var res struct {
		ReusedSeqs *int     `json:"reused_seqs"`
		Failures   []string `json:"failures"`
		Groups     []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 1 || res.ReusedSeqs == nil || len(res.Groups) != 2 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if !slices.Equal(res.Failures, []string{"wrong-key", "lost"}) {
		t.Errorf("--json failures %v", res.Failures)
	}
	for _, k := range []string{"deliveries", "distinct", "lost", "violations", "wrong_key", "duplicates", "unacked", "unexpected", "unlogged", "failures"} {
		if _, ok := res.Groups[0][k]; !ok {
			t.Errorf("--json group has no %q:\n%s", k, out)
		}
	}
	if res.Groups[0]["group"] != "g" || res.Groups[0]["wrong_key"] != 1.0 || res.Groups[1]["group"] != "late" || res.Groups[1]["lost"] != 4.0 {
		t.Errorf("--json groups: %v", res.Groups)
	}
}

func runVerify(args ...string) (string, string, int) {
	var out, errb strings.Builder
	code := runCtx(context.Background(), append([]string{"verify"}, args...), strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func TestAncestryCommand(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.txt")
	var b strings.Builder
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&b, "key-%d\n", i)
	}
	os.WriteFile(keys, []byte(b.String()), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"linear hashing splits one partition", []string{"--plugin", "linear-murmur2", "--from", "4", "--to", "5"}, 0, "declared\n  0 <- 0\n  1 <- 1\n  2 <- 2\n  3 <- 3\n  4 <- 0\n"},
		{"jump grows into new partitions only", []string{"--plugin", "jump", "--from", "2", "--to", "3"}, 0, "declared\n  0 <- 0\n  1 <- 1\n  2 <- 0-1\n"},
		{"declared and checked against keys", []string{"--plugin", "jump", "--from", "3", "--to", "5", "--keys", keys}, 0, "declared (2000 keys)"},
		{"a swap is observed", []string{"--plugin", "librdkafka-consistent", "--from", "4", "--to", "4", "--to-plugin", "kafka-murmur2", "--keys", keys}, 0, "observed (2000 keys)"},
		{"nothing known: all", []string{"--plugin", "kafka-murmur2", "--from", "3", "--to", "2"}, 0, "all\n  0 <- 0-2\n  1 <- 0-2\n"},
		{"bad count", []string{"--plugin", "jump", "--from", "0", "--to", "2"}, 2, ""},
		{"unknown plugin", []string{"--plugin", "nope", "--from", "1", "--to", "2"}, 2, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb strings.Builder
			code := runCtx(context.Background(), append([]string{"ancestry"}, tc.args...), strings.NewReader(""), &out, &errb)
			if code != tc.code || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("exit %d (want %d)\nstdout:\n%s\nstderr: %s", code, tc.code, out.String(), errb.String())
			}
		})
	}
}
