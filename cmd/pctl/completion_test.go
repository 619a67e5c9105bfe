package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestUnknownFlagIsOneLine: a mistyped flag gets one line that names it, suggests the nearest
// flag and says where the flags are, instead of the whole help text.
func TestUnknownFlagIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"partition", "--partitons", "3", "--plugin", "jump", "k"}, "pctl partition: unknown flag --partitons; did you mean --partitions? (run 'pctl partition --help' for the flags)"},
		{[]string{"partition", "-x", "k"}, "pctl partition: unknown flag -x (run 'pctl partition --help' for the flags)"},
		{[]string{"verify", "--nothing-like-it"}, "pctl verify: unknown flag --nothing-like-it (run 'pctl verify --help' for the flags)"},
		{[]string{"conformance", "jump", "--keys", "many"}, "pctl conformance: invalid value \"many\" for flag --keys"},
	} {
		stdout, stderr, code := runPctl(t, "", tc.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("pctl %v: exit %d, stdout %q, stderr %q; want exit 2 and one line containing %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// TestHelpListsFlagsGNUStyle: --help shows flags as --name, the way they are typed.
func TestHelpListsFlagsGNUStyle(t *testing.T) {
	out, _, code := runPctl(t, "", "partition", "--help")
	if code != exitOK || !strings.Contains(out, "\n  --partitions ") || !strings.Contains(out, "\n  --plugin ") || strings.Contains(out, "\n  -partitions") {
		t.Fatalf("exit %d, help:\n%s", code, out)
	}
	out, _, _ = runPctl(t, "", "plugin", "export", "--help")
	if !strings.Contains(out, "\n  -o FILE\n") {
		t.Fatalf("a one-letter flag is -o:\n%s", out)
	}
}

// TestBashCompletion sources the generated script in a real bash and asks it to complete.
func TestBashCompletion(t *testing.T) {
	script, stderr, code := runPctl(t, "", "completion", "bash")
	if code != exitOK {
		t.Fatalf("completion bash: exit %d: %s", code, stderr)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("PCTL_REQUIRE_TOOLCHAINS") != "" {
			t.Fatal("bash is required (PCTL_REQUIRE_TOOLCHAINS is set)")
		}
		t.Skip("no bash")
	}
	f := filepath.Join(t.TempDir(), "pctl.bash")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		q := make([]string, len(words))
		for i, w := range words {
			q[i] = "'" + w + "'"
		}
		prog := "source " + f + "; COMP_WORDS=(" + strings.Join(q, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) + "; _pctl; printf '%s\\n' \"${COMPREPLY[@]}\""
		out, err := exec.Command(bash, "--norc", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v: %s", err, out)
		}
		got := strings.Fields(string(out))
		sort.Strings(got)
		return got
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"pctl", "con"}, []string{"conformance", "consume"}},
		{[]string{"pctl", "topic", "re"}, []string{"repartition", "retire"}},
		{[]string{"pctl", "topic", "create", "--parti"}, []string{"--partitioner", "--partitions"}},
		{[]string{"pctl", "bench", "produce", "--rou"}, []string{"--rounds"}},
		{[]string{"pctl", "plugin", "export", "-"}, []string{"--help", "-o"}},
	} {
		got := complete(tc.words...)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("complete %v = %v, want %v", tc.words, got, tc.want)
		}
	}
}

// TestFishAndZshCompletionNameEveryCommand: every command and flag appears in the other scripts
// (no fish or zsh on the machine to run them).
func TestFishAndZshCompletionNameEveryCommand(t *testing.T) {
	fish, _, code := runPctl(t, "", "completion", "fish")
	if code != exitOK {
		t.Fatal(code)
	}
	zsh, _, _ := runPctl(t, "", "completion", "zsh")
	for _, c := range commands {
		if !strings.Contains(fish, " "+c.name) || !strings.Contains(zsh, c.name+")") {
			t.Errorf("command %s missing from a completion script", c.name)
		}
	}
	if !strings.Contains(fish, "__fish_seen_subcommand_from create' -l partitions") {
		t.Error("fish: topic create --partitions missing")
	}
	if _, stderr, code := runPctl(t, "", "completion", "tcsh"); code != exitUsage || !strings.Contains(stderr, "bash, zsh, fish") {
		t.Errorf("unknown shell: exit %d %q", code, stderr)
	}
}
