package plugins

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// toolchain is one family of rules in plugins/Makefile, with the pinned
// compiler versions that produced the committed modules. Another version may
// emit other bytes, so a machine without the pinned one cannot check them.
type toolchain struct {
	name    string
	target  string   // plugins/Makefile target
	outputs []string // the files it writes, relative to plugins/
	// pinned returns "" when the pinned toolchain is on this machine, else
	// what is missing or different.
	pinned func() string
}

// Pinned versions (scripts/install-toolchains.sh installs them on Debian 12).
const (
	pinnedClang = "clang version 14.0.6" // Debian 12 clang-14; wasm-ld is lld 14.0.6
	pinnedLLD   = "LLD 14.0.6"
	pinnedGo    = "go1.26.8"
	pinnedRustc = "rustc 1.63.0" // Debian 12 rustc + libstd-rust-dev-wasm32
	rustc       = "/usr/bin/rustc"
)

var toolchains = []toolchain{
	{
		name:   "clang",
		target: "builtin",
		outputs: []string{
			"builtin/jump.wasm",
			"builtin/kafka-murmur2.wasm",
			"builtin/librdkafka-consistent.wasm",
			"builtin/librdkafka-fnv1a.wasm",
			"builtin/linear-murmur2.wasm",
			"builtin/sarama-fnv1a.wasm",
		},
		pinned: func() string {
			if m := versionHas(pinnedClang, "clang", "--version"); m != "" {
				return m
			}
			return versionHas(pinnedLLD, "wasm-ld", "--version")
		},
	},
	{
		name:    "go",
		target:  "go",
		outputs: []string{"murmur2/kafka-murmur2-go.wasm"},
		pinned: func() string {
			out, err := exec.Command("go", "env", "GOVERSION").Output()
			if err != nil {
				return "go: " + err.Error()
			}
			if v := strings.TrimSpace(string(out)); v != pinnedGo {
				return fmt.Sprintf("go is %s, the committed module was built with %s", v, pinnedGo)
			}
			return ""
		},
	},
	{
		name:    "assemblyscript",
		target:  "assemblyscript",
		outputs: []string{"murmur2/kafka-murmur2-as.wasm"},
		pinned: func() string {
			if _, err := exec.LookPath("node"); err != nil {
				return "node: not found"
			}
			want, err := pinnedAssemblyScript()
			if err != nil {
				return err.Error()
			}
			b, err := os.ReadFile("murmur2/assemblyscript/node_modules/assemblyscript/package.json")
			if err != nil {
				return "assemblyscript " + want + " not installed (npm ci in plugins/murmur2/assemblyscript)"
			}
			var p struct{ Version string }
			if err := json.Unmarshal(b, &p); err != nil || p.Version != want {
				return fmt.Sprintf("assemblyscript %q installed, %s pinned (npm ci in plugins/murmur2/assemblyscript)", p.Version, want)
			}
			return ""
		},
	},
	{
		name:    "rust",
		target:  "rust",
		outputs: []string{"murmur2/kafka-murmur2-rust.wasm"},
		pinned: func() string {
			if m := versionHas(pinnedRustc, rustc, "--version"); m != "" {
				return m
			}
			if _, err := os.Stat("/usr/lib/rustlib/wasm32-unknown-unknown"); err != nil {
				return "the wasm32-unknown-unknown target of Debian's rustc (package libstd-rust-dev-wasm32)"
			}
			return ""
		},
	},
}

// versionHas runs cmd and returns "" if its output contains want, else a
// description of what is missing.
func versionHas(want, cmd string, args ...string) string {
	out, err := exec.Command(cmd, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s (%s): %v", cmd, want, err)
	}
	if !strings.Contains(string(out), want) {
		first, _, _ := strings.Cut(string(out), "\n")
		return fmt.Sprintf("%s is %q, the committed modules were built with %s", cmd, strings.TrimSpace(first), want)
	}
	return ""
}

// pinnedAssemblyScript reads the exact version package.json pins.
func pinnedAssemblyScript() (string, error) {
	b, err := os.ReadFile("murmur2/assemblyscript/package.json")
	if err != nil {
		return "", err
	}
	var p struct {
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return "", fmt.Errorf("murmur2/assemblyscript/package.json: %v", err)
	}
	v := p.DevDependencies["assemblyscript"]
	if v == "" || strings.ContainsAny(v, "^~<>=*x ") {
		return "", fmt.Errorf("murmur2/assemblyscript/package.json must pin an exact assemblyscript version, has %q", v)
	}
	return v, nil
}

// requireToolchain skips the test (or, with PCTL_REQUIRE_TOOLCHAINS=1 as CI
// sets it, fails it) when the pinned toolchain is missing.
func requireToolchain(t *testing.T, tc toolchain) {
	t.Helper()
	missing := ""
	if _, err := exec.LookPath("make"); err != nil {
		missing = "make: not found"
	} else {
		missing = tc.pinned()
	}
	if missing == "" {
		return
	}
	msg := fmt.Sprintf("cannot rebuild the %s modules: missing %s; run scripts/install-toolchains.sh", tc.name, missing)
	if os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" {
		t.Fatal(msg + " (PCTL_REQUIRE_TOOLCHAINS=1)")
	}
	t.Skip(msg)
}

// TestReproducible rebuilds every module with the pinned toolchains into a
// temporary directory and requires the committed bytes. A module's digest is
// its identity (spec/abi-v1.md section 1): committed bytes that no source
// produces would be a partitioner nobody can audit or rebuild.
func TestReproducible(t *testing.T) {
	for _, tc := range toolchains {
		t.Run(tc.name, func(t *testing.T) {
			requireToolchain(t, tc)
			out := t.TempDir()
			cmd := exec.Command("make", "--no-print-directory", "OUT="+out, tc.target)
			cmd.Env = append(os.Environ(), "MAKEFLAGS=")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("make %s failed: %v\n%s", tc.target, err, b)
			}
			for _, rel := range tc.outputs {
				committed, err := os.ReadFile(rel)
				if err != nil {
					t.Errorf("plugins/%s: %v (run `make plugins` and commit it)", rel, err)
					continue
				}
				rebuilt, err := os.ReadFile(filepath.Join(out, rel))
				if err != nil {
					t.Errorf("make %s did not write %s: %v", tc.target, rel, err)
					continue
				}
				if !bytes.Equal(committed, rebuilt) {
					t.Errorf("plugins/%s differs from what its source builds now "+
						"(committed %d bytes sha256:%x, rebuilt %d bytes sha256:%x): "+
						"run `make plugins` at the repository root and commit the .wasm with its source",
						rel, len(committed), sha256.Sum256(committed), len(rebuilt), sha256.Sum256(rebuilt))
				}
			}
		})
	}
}
