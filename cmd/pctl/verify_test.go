package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
