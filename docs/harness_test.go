package docs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseBlocks: the conventions are enforced; a page that breaks one is reported.
func TestParseBlocks(t *testing.T) {
	page := strings.Join([]string{
		"# t",
		"",
		"```sh",
		"pctl plugin list",
		"```",
		"",
		"<!-- not run: needs a cluster -->",
		"```sh",
		"pctl demo --cluster",
		"```",
		"",
		"<!-- not run -->",
		"```js",
		"x()",
		"```",
		"",
		"```",
		"pctl topic list",
		"```",
		"",
		"```text",
		"pctl: broker ready",
		"```",
		"",
		"Indented:",
		"",
		"    pctl conformance my.wasm",
		"",
		"- a list item",
		"",
		"    ./pctl in a list continuation is prose",
		"",
		"```python",
		"print(1)",
	}, "\n")
	blocks, problems := ParseBlocks("t.md", page)
	var got []string
	for _, b := range blocks {
		got = append(got, b.Lang+"|"+b.Runner()+"|"+b.NotRun+"|"+strings.TrimSpace(b.Code))
	}
	want := []string{
		"sh|sh||pctl plugin list",
		"sh|sh|needs a cluster|pctl demo --cluster",
		"js|node|(no reason given)|x()",
		"|||pctl topic list",
		"text|||pctl: broker ready",
		"python|python||print(1)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("blocks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	wantProblems := []string{
		"t.md:13: say why the block does not run",
		"t.md:17: a block of commands without a language never runs",
		"t.md:27: an indented code block of commands never runs",
		"t.md:33: the code block is never closed",
	}
	if len(problems) != len(wantProblems) {
		t.Fatalf("problems:\n%s", strings.Join(problems, "\n"))
	}
	for i, w := range wantProblems {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d = %q, want %q...", i, problems[i], w)
		}
	}
}

func TestWithReadyWaits(t *testing.T) {
	n := 0
	got := WithReadyWaits(strings.Join([]string{
		"pctl serve --data ./d &           # prints: ready (...) & more",
		"a && b",
		"pctl serve > log &",
		"echo done",
		"sh -c 'echo x >&2' &",
		"./pctl nats-server -c ./cluster/node-1.conf &",
	}, "\n"), &n)
	want := strings.Join([]string{
		`pctl serve --data ./d > "$__doc_dir/bg-1".out 2> "$__doc_dir/bg-1".err & __doc_wait_ready $! "$__doc_dir/bg-1"`,
		"a && b",
		"pctl serve > log &",
		"echo done",
		`sh -c 'echo x >&2' > "$__doc_dir/bg-2".out 2> "$__doc_dir/bg-2".err & __doc_wait_ready $! "$__doc_dir/bg-2"`,
		`./pctl nats-server -c ./cluster/node-1.conf > "$__doc_dir/bg-3".out 2> "$__doc_dir/bg-3".err & __doc_wait_ready $! "$__doc_dir/bg-3" nats-server`,
	}, "\n")
	if got != want || n != 3 {
		t.Errorf("got (n=%d):\n%s\nwant:\n%s", n, got, want)
	}
}

// TestSessionReportsFailures: the runner fails a block whose command fails, in every language,
// and a background server that dies before it is ready; it keeps exports and background
// processes from one block to the next, and its network namespace has a free port 4222.
func TestSessionReportsFailures(t *testing.T) {
	requireTool(t, "unshare -n", func() error { return exec.Command("unshare", "-n", "true").Run() })
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sdk", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, nodeErr := exec.LookPath("node")
	cases := []struct {
		name   string
		blocks []Block
		fail   string // "" for success; else a word of the error
	}{
		{"state carries over", []Block{
			{File: "p.md", Lang: "sh", Code: "export FOO=bar\nsh -c 'echo up; sleep 30' &\ncd sdk\n"},
			{File: "p.md", Lang: "sh", Code: "test \"$FOO\" = bar\ntest \"$(basename \"$PWD\")\" = sdk\njobs >/dev/null\n"},
		}, ""},
		{"a failing command", []Block{{File: "p.md", Lang: "sh", Code: "true\nfalse\necho never\n"}}, "it failed"},
		{"a failing pipeline", []Block{{File: "p.md", Lang: "sh", Code: "false | cat\n"}}, "it failed"},
		{"a server that dies before it is ready", []Block{{File: "p.md", Lang: "sh", Code: "sh -c 'echo bad flag >&2; exit 2' &\necho after\n"}}, "exited before it was ready"},
		{"a server's log is not its ready line", []Block{{File: "p.md", Lang: "sh", Code: "sh -c 'echo Server is ready >&2; sleep 1; echo ready; sleep 30' &\n"}, {File: "p.md", Lang: "sh", Code: "grep -q ready \"$__doc_dir/bg-1.out\"\n"}}, ""},
		{"the ready line is awaited", []Block{{File: "p.md", Lang: "sh", Code: "sh -c 'sleep 1; echo ready; sleep 30' &\n"}, {File: "p.md", Lang: "sh", Code: "grep -q ready \"$__doc_dir/bg-1.out\"\n"}}, ""},
		{"port 4222 is free", []Block{{File: "p.md", Lang: "python", Code: "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 4222))\n"}}, ""},
		{"a python block that raises", []Block{{File: "p.md", Lang: "python", Code: "raise SystemExit(3)\n"}}, "it failed"},
	}
	if nodeErr == nil {
		cases = append(cases, struct {
			name   string
			blocks []Block
			fail   string
		}{"a js block that throws", []Block{{File: "sdk/x/README.md", Lang: "js", Code: "throw new Error('boom');\n"}}, "boom"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			py, err := exec.LookPath("python3")
			if err != nil {
				t.Skip("python3")
			}
			// The runner starts Python blocks with sdk/python/.venv/bin/python.
			venv := filepath.Join(root, "sdk", "python", ".venv", "bin")
			_ = os.MkdirAll(venv, 0o755)
			_ = os.Symlink(py, filepath.Join(venv, "python"))
			s, err := startSession(root, dir, os.Environ())
			if err != nil {
				t.Fatal(err)
			}
			defer s.close()
			var failure error
			for i, b := range tc.blocks {
				if failure = s.run(i, b); failure != nil {
					break
				}
			}
			switch {
			case tc.fail == "" && failure != nil:
				t.Fatal(failure)
			case tc.fail != "" && failure == nil:
				t.Fatalf("the runner did not report the failure; the session printed:\n%s", s.logSince(0))
			case tc.fail != "" && !strings.Contains(failure.Error(), tc.fail):
				t.Fatalf("the failure does not say %q: %v", tc.fail, failure)
			}
		})
	}
}
