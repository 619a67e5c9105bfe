package wasmbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/instrumented.txt from this implementation")

// goldenFile lists, for every module of goldenCorpus, the SHA-256 of the rewritten module under
// the hosts' default limits, or the class of the refusal. The Node, Python and Java hosts port
// this rewriting and their tests compare their own output with this file, so that every host
// charges the same fuel at the same points (spec/abi-v1.md §7.2).
const goldenFile = "testdata/instrumented.txt"

// goldenLocalFile is goldenFile for the Go host's variant (Limits.LocalFuel): no port reproduces
// it, it pins the bytes so that a change of the variant is deliberate (runtime's
// TestLocalFuelSameWork checks that it charges what the reference charges).
const goldenLocalFile = "testdata/instrumented-localfuel.txt"

// goldenCorpus: globs relative to the repository root.
var goldenCorpus = []string{
	"runtime/testdata/hostile/*.wasm",
	"runtime/internal/wasmbin/testdata/*.wasm",
	"plugins/builtin/*.wasm",
	"plugins/murmur2/*.wasm",
}

// hostLimits are the limits every host instruments with (spec/abi-v1.md §7): the defaults of
// runtime.Config.
func hostLimits() Limits {
	ef := map[string]int64{"_initialize": 1 << 33}
	for _, name := range []string{"pctl_abi_version", "pctl_key_buffer", "pctl_partition", "pctl_configure", "pctl_metadata", "pctl_partition_batch", "pctl_ancestry"} {
		ef[name] = 1 << 31
	}
	return Limits{InitialFuel: 1 << 33, MaxDepth: 1000, ExportFuel: ef, MaxMemoryPages: 512, MaxTableElements: 131072, MoveStart: true}
}

// TestInstrumentGolden: this implementation's output on the corpus is the one recorded (run with
// -update after a deliberate change of the rewriting, and change the ports to match).
func TestInstrumentGolden(t *testing.T) {
	t.Run("reference", func(t *testing.T) { checkGolden(t, goldenFile, hostLimits(), "") })
	lim := hostLimits()
	lim.LocalFuel = true
	t.Run("local fuel", func(t *testing.T) { checkGolden(t, goldenLocalFile, lim, " and LocalFuel") })
}

func checkGolden(t *testing.T, goldenFile string, lim Limits, what string) {
	root := filepath.Join("..", "..", "..")
	var files []string
	for _, g := range goldenCorpus {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	var b strings.Builder
	fmt.Fprintf(&b, "# SHA-256 of each module rewritten by runtime/internal/wasmbin.Instrument with the hosts' default\n")
	fmt.Fprintf(&b, "# limits (fuel 2^31 per ABI export, 2^33 for _initialize and the moved start function, depth 1000,\n")
	fmt.Fprintf(&b, "# 512 pages, 131072 table elements%s), or the class of its refusal. Regenerate: go test ./runtime/internal/wasmbin -update\n", what)
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := Instrument(data, lim)
		switch {
		case errors.Is(err, ErrUnsupportedFeature):
			fmt.Fprintf(&b, "unsupported %s\n", rel)
		case err != nil:
			fmt.Fprintf(&b, "malformed %s\n", rel)
		default:
			sum := sha256.Sum256(out)
			fmt.Fprintf(&b, "%s %s\n", hex.EncodeToString(sum[:]), rel)
		}
	}
	if *update {
		if err := os.WriteFile(goldenFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != b.String() {
		t.Fatalf("%s is stale or the rewriting changed: run go test ./runtime/internal/wasmbin -update, check the diff, and make the Node, Python and Java ports produce the same bytes\n%s", goldenFile, b.String())
	}
}
