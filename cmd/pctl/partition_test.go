package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pctl.dev/pctl/partitioner"
)

func runPctl(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb strings.Builder
	code := runCtx(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// TestPartitionCommand: pctl partition's answers (against the native built-in, itself pinned to
// the real clients' vectors) and its errors, each with its exit status and a line that says what
// to do.
func TestPartitionCommand(t *testing.T) {
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	nat, _ := partitioner.Native("kafka-murmur2")
	want := func(keys ...string) string {
		var b strings.Builder
		for _, k := range keys {
			p, _ := nat.Partition([]byte(k), 12)
			fmt.Fprintln(&b, p)
		}
		return b.String()
	}
	notWasm := filepath.Join(t.TempDir(), "x.wasm")
	os.WriteFile(notWasm, []byte("hello"), 0o644)
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"keys as arguments", "", []string{"--plugin", "kafka-murmur2", "--partitions", "12", "user-1", "user-2", ""}, 0, want("user-1", "user-2", ""), ""},
		{"keys on stdin, the empty line is the empty key", "user-1\n\nuser-2\n", []string{"--plugin", "kafka-murmur2", "--partitions", "12"}, 0, want("user-1", "", "user-2"), ""},
		{"no final newline", "user-1\nuser-2", []string{"--plugin", "kafka-murmur2", "--partitions", "12"}, 0, want("user-1", "user-2"), ""},
		{"hex keys", "", []string{"--plugin", "kafka-murmur2", "--partitions", "12", "--hex", "75736572", ""}, 0, want("user", ""), ""},
		{"native", "", []string{"--plugin", "kafka-murmur2", "--partitions", "12", "--native", "user-1"}, 0, want("user-1"), ""},
		{"by digest", "", []string{"--plugin", "sha256:" + nat.Digest(), "--partitions", "12", "user-1"}, 0, want("user-1"), ""},
		{"n = 1", "", []string{"--plugin", "jump", "--partitions", "1", "a", "b"}, 0, "0\n0\n", ""},
		{"unknown plugin", "", []string{"--plugin", "nope", "--partitions", "3", "x"}, 2, "", "unknown partitioner"},
		{"not wasm", "", []string{"--plugin", notWasm, "--partitions", "3", "x"}, 2, "", "not a WebAssembly module"},
		{"missing --plugin", "", []string{"--partitions", "3", "x"}, 2, "", "--plugin is required"},
		{"partitions 0", "", []string{"--plugin", "jump", "--partitions", "0", "x"}, 2, "", "out of range"},
		{"partitions negative", "", []string{"--plugin", "jump", "--partitions", "-4", "x"}, 2, "", "out of range"},
		{"partitions above 2^31-1", "", []string{"--plugin", "jump", "--partitions", "2147483648", "x"}, 2, "", "out of range"},
		{"partitions not a number", "", []string{"--plugin", "jump", "--partitions", "many", "x"}, 2, "", "not an integer"},
		{"bad hex argument", "", []string{"--plugin", "jump", "--partitions", "3", "--hex", "zz"}, 2, "", "not hex"},
		{"bad hex on stdin names the line", "00\nzz\n", []string{"--plugin", "jump", "--partitions", "3", "--hex"}, 2, "", "line 2"},
		{"native takes no config", "", []string{"--plugin", "jump", "--partitions", "3", "--native", "--config", "a=b", "x"}, 2, "", "no --config"},
		{"config the plugin does not take", "", []string{"--plugin", "jump", "--partitions", "3", "--config", "a=b", "x"}, 2, "", "takes no configuration"},
		{"a plugin that loops", "", []string{"--plugin", "../../runtime/testdata/hostile/loop-forever.wasm", "--partitions", "3", "x"}, 1, "", "time limit exceeded"},
		{"a plugin that traps on a key", "", []string{"--plugin", "../../runtime/testdata/hostile/trap-some-keys.wasm", "--partitions", "3", "--hex", "ff"}, 1, "", "trap-some-keys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := runPctl(t, tc.stdin, append([]string{"partition"}, tc.args...)...)
			if code != tc.code || (tc.code == 0 && out != tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("exit %d (want %d)\nstdout %q (want %q)\nstderr %q (want it to contain %q)", code, tc.code, out, tc.stdout, errOut, tc.stderr)
			}
			if code != 0 && strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("an error is one line on stderr, got:\n%s", errOut)
			}
		})
	}
}

// TestPartitionManyKeysOnStdin: a large stdin goes through the batch path and agrees with the
// native implementation line for line.
func TestPartitionManyKeysOnStdin(t *testing.T) {
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	n := 200000
	if testing.Short() {
		n = 20000
	}
	var in strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&in, "key-%d\n", i)
	}
	out, errOut, code := runPctl(t, in.String(), "partition", "--plugin", "librdkafka-fnv1a", "--partitions", "1000")
	if code != 0 {
		t.Fatal(errOut)
	}
	nat, _ := partitioner.Native("librdkafka-fnv1a")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines for %d keys", len(lines), n)
	}
	for i, l := range lines {
		p, _ := nat.Partition([]byte(fmt.Sprintf("key-%d", i)), 1000)
		if l != fmt.Sprint(p) {
			t.Fatalf("key-%d: %s, native %d", i, l, p)
		}
	}
}

func TestPluginCommands(t *testing.T) {
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	out, _, code := runPctl(t, "", "plugin", "list")
	if code != 0 || !strings.Contains(out, "kafka-murmur2") || !strings.Contains(out, "linear-murmur2") {
		t.Fatalf("plugin list: %d\n%s", code, out)
	}
	out, _, code = runPctl(t, "", "plugin", "inspect", "jump", "--json")
	if code != 0 || !strings.Contains(out, `"profile": "portable"`) || !strings.Contains(out, `"ancestry": true`) {
		t.Fatalf("plugin inspect: %d\n%s", code, out)
	}
	out, _, code = runPctl(t, "", "plugin", "inspect", "../../plugins/murmur2/kafka-murmur2-go.wasm")
	if code != 0 || !strings.Contains(out, "wasi-deterministic") {
		t.Fatalf("plugin inspect of the Go build: %d\n%s", code, out)
	}
	out, _, code = runPctl(t, "", "plugin", "export", "jump")
	if code != 0 || !strings.HasPrefix(out, "\x00asm") {
		t.Fatalf("plugin export: %d", code)
	}
	_, errOut, code := runPctl(t, "", "plugin", "inspect", "../../runtime/testdata/hostile/missing-export.wasm")
	if code != 2 || !strings.Contains(errOut, "pctl_partition") {
		t.Fatalf("inspect of a non-conforming module: %d %s", code, errOut)
	}
}
