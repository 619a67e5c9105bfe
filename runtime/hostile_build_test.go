package runtime_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileSourcesRebuild: every module of testdata/hostile is what its source builds, byte for
// byte, so that a .wasm can never drift from the .wat a reader checks (GitHub issue 9): each
// <name>.wat through wat2wasm (wabt, installed by scripts/install-toolchains.sh), oversize.wasm
// through oversize/gen.go, and the two files that are not modules as build.sh writes them. A
// module without a source fails too. Without wat2wasm the test skips, or fails under
// PCTL_REQUIRE_TOOLCHAINS=1 (CI).
func TestHostileSourcesRebuild(t *testing.T) {
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" {
			t.Fatal("wat2wasm not found and PCTL_REQUIRE_TOOLCHAINS=1: run scripts/install-toolchains.sh")
		}
		t.Skip("wat2wasm not found: run scripts/install-toolchains.sh (PCTL_REQUIRE_TOOLCHAINS=1 makes this a failure)")
	}
	dir := filepath.Join("testdata", "hostile")
	tmp := t.TempDir()
	build := func(wat, out string) {
		t.Helper()
		if b, err := exec.Command(wat2wasm, wat, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("wat2wasm %s: %v\n%s", wat, err, b)
		}
	}
	same := func(name string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what its source builds (%d bytes committed, %d built): run testdata/hostile/build.sh and commit the result", name, len(got), len(want))
		}
	}
	wasms, _ := filepath.Glob(filepath.Join(dir, "*.wasm"))
	derived := map[string]bool{"not-wasm.wasm": true, "truncated.wasm": true, "oversize.wasm": true}
	for _, w := range wasms {
		name := filepath.Base(w)
		if derived[name] {
			continue
		}
		stem := strings.TrimSuffix(name, ".wasm")
		wat := filepath.Join(dir, stem+".wat")
		if _, err := os.Stat(wat); err != nil {
			t.Errorf("%s has no source %s.wat beside it", name, stem)
			continue
		}
		out := filepath.Join(tmp, name)
		build(wat, out)
		b, _ := os.ReadFile(out)
		same(name, b)
	}
	wats, _ := filepath.Glob(filepath.Join(dir, "*.wat"))
	for _, w := range wats {
		if _, err := os.Stat(strings.TrimSuffix(w, ".wat") + ".wasm"); err != nil {
			t.Errorf("%s has no module beside it: run testdata/hostile/build.sh", filepath.Base(w))
		}
	}
	// oversize.wasm: oversize.wat plus the 8 MiB segment of oversize/gen.go.
	base := filepath.Join(tmp, "oversize.base.wasm")
	build(filepath.Join(dir, "oversize.wat"), base)
	over := filepath.Join(tmp, "oversize.wasm")
	gen := exec.Command("go", "run", filepath.Join("oversize", "gen.go"), base, over)
	gen.Dir = dir
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("go run oversize/gen.go: %v\n%s", err, b)
	}
	b, _ := os.ReadFile(over)
	same("oversize.wasm", b)
	// The two files that are not modules (build.sh).
	same("not-wasm.wasm", []byte("This is not a WebAssembly module: a pctl host must refuse it at load.\n"))
	loop, _ := os.ReadFile(filepath.Join(dir, "loop-forever.wasm"))
	same("truncated.wasm", loop[:24])
}
