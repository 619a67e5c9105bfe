package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// conformanceCLI runs `pctl conformance ARGS...` in-process with a private compilation cache and
// few keys (the checks themselves are tested in package conformance).
func conformanceCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	var out, errb bytes.Buffer
	code = runCtx(context.Background(), append([]string{"conformance"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func hostileFile(name string) string {
	return filepath.Join("..", "..", "runtime", "testdata", "hostile", name)
}

func TestConformanceBuiltinPasses(t *testing.T) {
	code, out, errs := conformanceCLI(t, "kafka-murmur2", "--keys", "500")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 || !strings.HasPrefix(lines[0], "CHECK") || !strings.HasPrefix(lines[9], "PASS: kafka-murmur2 sha256:") ||
		!strings.HasSuffix(lines[9], "(8 checks)") {
		t.Fatalf("want a header, 8 checks and a PASS line:\n%s", out)
	}
	for i, name := range []string{"abi", "imports", "range", "determinism", "limits", "ancestry", "compatibility", "balance"} {
		if f := strings.Fields(lines[i+1]); f[0] != name {
			t.Errorf("line %d is %q, want check %s", i+1, lines[i+1], name)
		}
	}
}

func TestConformanceJSON(t *testing.T) {
	code, out, errs := conformanceCLI(t, "--json", "linear-murmur2", "--keys", "300", "--seed", "9")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
	var rep struct {
		Schema int `json:"schema"`
		Module struct {
			Digest, Name, Source string
		} `json:"module"`
		Options struct {
			Keys int    `json:"keys"`
			Seed uint64 `json:"seed"`
		} `json:"options"`
		Results []struct{ Name, Status, Reason string } `json:"results"`
		Passed  bool                                    `json:"passed"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if rep.Schema != 1 || !rep.Passed || rep.Module.Name != "linear-murmur2" || rep.Module.Source != "built-in linear-murmur2" ||
		len(rep.Module.Digest) != 64 || rep.Options.Keys != 300 || rep.Options.Seed != 9 || len(rep.Results) != 8 {
		t.Fatalf("unexpected report: %+v", rep)
	}
}

// TestConformanceFailures: a module that breaks a rule exits 1 with the failing check named;
// a file that is not a module at all is checked too (the user asked about that file).
func TestConformanceFailures(t *testing.T) {
	tests := []struct {
		name string
		args []string
		line string // a line of the table
		sum  string // the summary starts with this
	}{
		{"depends on the random stream", []string{hostileFile("rand-clock.wasm")}, "determinism    FAIL    key", "FAIL: rand-clock sha256:"},
		{"not wasm", []string{hostileFile("not-wasm.wasm")}, "abi            FAIL    not a WebAssembly module", "FAIL: file ../../runtime/testdata/hostile/not-wasm.wasm sha256:"},
		{"forbidden import", []string{hostileFile("forbidden-import.wasm")}, "imports        FAIL    forbidden import: imports env.now", "FAIL: file "},
		{"config for a module without pctl_configure", []string{"kafka-murmur2", "--config", "a=1"}, "abi            FAIL    plugin takes no configuration", "FAIL: kafka-murmur2 "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := conformanceCLI(t, append(tc.args, "--keys", "300")...)
			if code != exitFailure || errs != "" {
				t.Fatalf("exit %d, stderr %q, want 1 and no stderr\n%s", code, errs, out)
			}
			if !strings.Contains(out, "\n"+tc.line) {
				t.Errorf("no line %q in\n%s", tc.line, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if !strings.HasPrefix(lines[len(lines)-1], tc.sum) {
				t.Errorf("summary %q, want %q...", lines[len(lines)-1], tc.sum)
			}
		})
	}
}

func TestConformanceConfig(t *testing.T) {
	code, out, errs := conformanceCLI(t, hostileFile("config-echo.wasm"), "--config", "a=1", "--keys", "300")
	if code != exitOK || !strings.Contains(out, "config of 4 bytes accepted") {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
}

func TestConformanceUsage(t *testing.T) {
	dir := t.TempDir()
	unreadable := filepath.Join(dir, "secret.wasm")
	if err := os.WriteFile(unreadable, []byte("\x00asm"), 0o000); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		mention string
	}{
		{"no plugin", nil, "give exactly one plugin"},
		{"two plugins", []string{"jump", "kafka-murmur2"}, "give exactly one plugin"},
		{"unknown plugin", []string{"no-such-plugin"}, "unknown partitioner"},
		{"unreadable file (a directory)", []string{dir}, "cannot read plugin file"},
		{"bad --keys", []string{"jump", "--keys", "0"}, "--keys 0 is out of range"},
		{"non-numeric --keys", []string{"jump", "--keys", "many"}, "invalid value"},
		{"--seed 0", []string{"jump", "--seed", "0"}, "--seed 0"},
		{"bad --config", []string{"jump", "--config", "novalue"}, "has no '='"},
		{"unknown flag", []string{"jump", "--fast"}, "unknown flag --fast (run 'pctl conformance --help' for the flags)"},
	}
	if os.Geteuid() != 0 { // root reads any file
		tests = append(tests, struct {
			name    string
			args    []string
			mention string
		}{"unreadable file", []string{unreadable}, "cannot read plugin file"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := conformanceCLI(t, tc.args...)
			if code != exitUsage || out != "" || !strings.Contains(errs, tc.mention) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2 and a message mentioning %q", code, out, errs, tc.mention)
			}
		})
	}
}

func TestConformanceHelp(t *testing.T) {
	code, out, _ := conformanceCLI(t, "--help")
	if code != exitOK || !strings.Contains(out, "Usage: pctl conformance NAME|sha256:DIGEST|FILE.wasm") || !strings.Contains(out, "Exit status") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
