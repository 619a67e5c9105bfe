package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// pnRef is the templates' function in Go, the reference all four template modules must match:
// FNV-1a-64 of the key starting from the offset basis xor seed, MurmurHash3's fmix64, unsigned
// remainder by n (plugins/templates/*/README.md).
func pnRef(key []byte, n int32, seed uint64) int32 {
	h := uint64(0xcbf29ce484222325) ^ seed
	for _, b := range key {
		h ^= uint64(b)
		h *= 0x100000001b3
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return int32(h % uint64(n))
}

// TestTemplateReferenceVectors pins pnRef itself, so that a change to it cannot carry all four
// templates along unnoticed. Computed independently (Python, arbitrary-precision integers).
func TestTemplateReferenceVectors(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	tests := []struct {
		name string
		key  []byte
		seed uint64
		want [4]int32 // n = 2, 12, 1000, 2147483647
	}{
		{"empty key", []byte{}, 0, [4]int32{0, 2, 342, 439969771}},
		{"a", []byte("a"), 0, [4]int32{1, 11, 315, 788799758}},
		{"alice", []byte("alice"), 0, [4]int32{0, 8, 236, 277588356}},
		{"user-1", []byte("user-1"), 0, [4]int32{1, 5, 477, 1237973777}},
		{"alice seed 42", []byte("alice"), 42, [4]int32{0, 0, 848, 2098817289}},
		{"bytes 0-255", all, 0, [4]int32{0, 2, 366, 2115940577}},
		{"alice seed 2^64-1", []byte("alice"), 1<<64 - 1, [4]int32{1, 11, 31, 1714704062}},
	}
	for _, tc := range tests {
		for i, n := range []int32{2, 12, 1000, 2147483647} {
			if got := pnRef(tc.key, n, tc.seed); got != tc.want[i] {
				t.Errorf("%s, n=%d: reference gives %d, want %d (the templates' function changed: keys remap for every plugin started from them)", tc.name, n, got, tc.want[i])
			}
		}
	}
}

// pnKeys returns count seeded random keys: mostly 0 to 40 bytes, some up to 300, a few of 4 KiB,
// and the empty key first.
func pnKeys(seed uint64, count int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x746d706c))
	keys := make([][]byte, count)
	keys[0] = []byte{}
	for i := 1; i < count; i++ {
		var n int
		switch x := r.IntN(1000); {
		case x < 900:
			n = r.IntN(41)
		case x < 999:
			n = r.IntN(301)
		default:
			n = 4096
		}
		k := make([]byte, n)
		for j := range k {
			k[j] = byte(r.Uint32())
		}
		keys[i] = k
	}
	return keys
}

// pnNs are the partition counts the template checks cover.
var pnNs = []int32{1, 2, 3, 12, 1000, 65536, 2147483647}

// pnCheckKeys is the number of random keys each module is checked on with the default config and
// n = 1000 (a tenth of them for the other n of pnNs), each both by single and by batch calls.
const pnCheckKeys = 100_000

var pnRuntimeOnce = sync.OnceValues(func() (*runtime.Runtime, error) {
	return runtime.New(context.Background(), runtime.Config{})
})

// pnLoad loads a module into a runtime shared by the tests of this file (never closed: it lives
// as long as the test binary).
func pnLoad(t *testing.T, wasm []byte) *runtime.Module {
	t.Helper()
	rt, err := pnRuntimeOnce()
	if err != nil {
		t.Fatal(err)
	}
	m, err := rt.Load(context.Background(), wasm)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return m
}

// pnRunMu serialises pnRun: runCtx sets the package's helpOut, so two in-process runs at once
// (this file's parallel subtests) would race on it.
var pnRunMu sync.Mutex

// pnRun runs pctl in-process and returns its exit status, stdout and stderr.
func pnRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	pnRunMu.Lock()
	defer pnRunMu.Unlock()
	var stdout, stderr bytes.Buffer
	code := runCtx(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// pnCheckModule checks a template module (committed or freshly built) against the ABI and the
// reference function: metadata and profile; `pctl conformance`, unchanged, with the default
// config, and with seed=42 on fewer keys unless lang is go (one conformance run of the 1.8 MB Go
// module takes over 20 s under -race on two cores); random keys by single and batch calls for
// every n in pnNs; seeds; rejected configs; declared ancestry. It returns the module's partitions
// of keys for n = 1000, for cross-language checks.
func pnCheckModule(t *testing.T, lang, wantName string, wasm []byte, keys [][]byte) []int32 {
	t.Helper()
	ctx := context.Background()
	m := pnLoad(t, wasm)
	wantProfile := runtime.ProfilePortable
	if lang == "go" {
		wantProfile = runtime.ProfileWASIDeterministic
	}
	if m.Profile != wantProfile {
		t.Errorf("profile %s, want %s (imports %v)", m.Profile, wantProfile, m.Imports)
	}
	if m.Metadata.Name != wantName || m.Metadata.Version != "0.1.0" || !m.Metadata.Has("ancestry") {
		t.Errorf("metadata %+v, want name %q, version 0.1.0, property ancestry", m.Metadata, wantName)
	}
	if !m.HasBatch || !m.HasConfigure || !m.HasMetadata || !m.HasAncestry {
		t.Errorf("exports %v: a template must show every optional export but _initialize", m.Exports())
	}

	// `pctl conformance`, unchanged, as a user runs it on their build.
	path := filepath.Join(t.TempDir(), wantName+".wasm")
	if err := os.WriteFile(path, wasm, 0o644); err != nil {
		t.Fatal(err)
	}
	runs := [][]string{{"conformance", path}}
	if lang != "go" {
		runs = append(runs, []string{"conformance", path, "--config", "seed=42", "--keys", "5000"})
	}
	for _, args := range runs {
		if code, out, errOut := pnRun(t, args...); code != exitOK {
			t.Errorf("pctl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
	}

	pool, err := m.NewPool(ctx, nil, runtime.PoolOptions{Size: 1})
	if err != nil {
		t.Fatalf("new pool: %v", err)
	}
	defer pool.Close()
	out := make([]int32, len(keys))
	var at1000 []int32
	for _, n := range pnNs {
		// All keys for n = 1000 (the cross-language comparison), a tenth for the other n.
		ks := keys
		if n != 1000 {
			ks = keys[:len(keys)/10]
		}
		if err := pool.PartitionBatch(ks, n, out[:len(ks)]); err != nil {
			t.Fatalf("batch, n=%d: %v", n, err)
		}
		bad := 0
		for i, k := range ks {
			want := pnRef(k, n, 0)
			single, err := pool.Partition(k, n)
			if err != nil {
				t.Fatalf("key %d (%d bytes), n=%d: %v", i, len(k), n, err)
			}
			if (single != want || out[i] != want) && bad < 5 {
				bad++
				t.Errorf("key %d %x, n=%d: single call %d, batch %d, reference %d", i, truncBytes(k, 16), n, single, out[i], want)
			}
		}
		if n == 1000 {
			at1000 = slices.Clone(out[:len(ks)])
		}
	}

	// Seeds: each a different layout, each matching the reference.
	for _, seed := range []uint64{1, 42, 1<<64 - 1} {
		cfg := []byte(fmt.Sprintf("seed=%d\n", seed))
		sp, err := m.NewPool(ctx, cfg, runtime.PoolOptions{Size: 1})
		if err != nil {
			t.Fatalf("config %q: %v", cfg, err)
		}
		few := keys[:5000]
		if err := sp.PartitionBatch(few, 12, out[:len(few)]); err != nil {
			t.Fatalf("config %q: batch: %v", cfg, err)
		}
		for i, k := range few {
			if want := pnRef(k, 12, seed); out[i] != want {
				t.Errorf("config %q, key %x, n=12: %d, reference %d", cfg, truncBytes(k, 16), out[i], want)
				break
			}
		}
		sp.Close()
	}

	// Malformed configs are rejected with PCTL_E_CONFIG; a leading zero is still a number.
	for _, cfg := range []string{"seed=\n", "seed=abc\n", "seed=-1\n", "seed=+1\n", "seed=1x\n",
		"seed=18446744073709551616\n", "seed=99999999999999999999\n", "seed=1\nseed=2\n",
		"seed=1", "salt=1\n", "seed\n", "=1\n", "\n"} {
		if p, err := m.NewPool(ctx, []byte(cfg), runtime.PoolOptions{Size: 1}); !errors.Is(err, runtime.ErrConfigRejected) {
			t.Errorf("config %q: got %v, want %v", cfg, err, runtime.ErrConfigRejected)
			if p != nil {
				p.Close()
			}
		}
	}
	if p, err := m.NewPool(ctx, []byte("seed=007\n"), runtime.PoolOptions{Size: 1}); err != nil {
		t.Errorf("config seed=007: %v", err)
	} else {
		if got, _ := p.Partition([]byte("alice"), 1000); got != pnRef([]byte("alice"), 1000, 7) {
			t.Errorf("seed=007 gives %d for alice, want seed 7's %d", got, pnRef([]byte("alice"), 1000, 7))
		}
		p.Close()
	}

	// Declared ancestry: exact (one parent) when to_n is a multiple of from_n, declined otherwise.
	for _, c := range []struct{ from, to int32 }{{1, 1}, {1, 5}, {3, 3}, {3, 6}, {4, 12}, {12, 4}, {4, 6}, {5, 3}, {1000, 2147483647}} {
		for _, child := range []int32{0, 1, c.to / 2, c.to - 1} {
			if child >= c.to {
				continue
			}
			got, err := pool.Ancestry(c.from, c.to, child)
			if c.to%c.from != 0 {
				if !errors.Is(err, runtime.ErrUnsupported) {
					t.Errorf("ancestry(%d, %d, %d): %v %v, want %v", c.from, c.to, child, got, err, runtime.ErrUnsupported)
				}
				continue
			}
			want := []runtime.Range{{Lo: child % c.from, Hi: child%c.from + 1}}
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("ancestry(%d, %d, %d): %v %v, want %v", c.from, c.to, child, got, err, want)
			}
		}
	}
	return at1000
}

// pnPartitions returns a module's partitions of keys among n (batch calls).
func pnPartitions(wasm []byte, keys [][]byte, n int32) ([]int32, error) {
	rt, err := pnRuntimeOnce()
	if err != nil {
		return nil, err
	}
	m, err := rt.Load(context.Background(), wasm)
	if err != nil {
		return nil, err
	}
	p, err := m.NewPool(context.Background(), nil, runtime.PoolOptions{Size: 1})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	out := make([]int32, len(keys))
	return out, p.PartitionBatch(keys, n, out)
}

func truncBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// TestTemplateModules checks the committed build of every template (no toolchain needed) against
// the reference, and requires the four to give identical partitions to each other.
func TestTemplateModules(t *testing.T) {
	keys := pnKeys(1, pnCheckKeys)
	results := make(map[string][]int32)
	var mu sync.Mutex
	t.Run("lang", func(t *testing.T) {
		for _, lang := range plugins.TemplateLangs() {
			t.Run(lang, func(t *testing.T) {
				t.Parallel()
				wasm, err := plugins.TemplateModule(lang)
				if err != nil {
					t.Fatal(err)
				}
				r := pnCheckModule(t, lang, plugins.TemplateName, wasm, keys)
				mu.Lock()
				results[lang] = r
				mu.Unlock()
			})
		}
	})
	pnRequireAgree(t, results, keys)
}

// pnRequireAgree requires every language's partitions (n = 1000) to be identical.
func pnRequireAgree(t *testing.T, results map[string][]int32, keys [][]byte) {
	t.Helper()
	var first string
	for _, lang := range sortedKeys(results) {
		if first == "" {
			first = lang
			continue
		}
		a, b := results[first], results[lang]
		if len(a) != len(b) {
			t.Errorf("%s gave %d partitions, %s %d", first, len(a), lang, len(b))
			continue
		}
		for i := range a {
			if a[i] != b[i] {
				t.Errorf("key %x, n=1000: %s gives %d, %s gives %d: the templates disagree", truncBytes(keys[i], 16), first, a[i], lang, b[i])
				break
			}
		}
	}
}

// pnPinned are the toolchain versions that built the committed template modules (as in
// plugins/reproducible_test.go); another version may emit other bytes for the same source.
var pnPinned = map[string]struct {
	want string   // substring of the version output
	cmd  []string // command printing the version (RUSTC is substituted for rustc)
}{
	"c":    {"clang version 14.0.6", []string{"clang", "--version"}},
	"go":   {"go1.26.8", []string{"go", "env", "GOVERSION"}},
	"rust": {"rustc 1.63.0", []string{"rustc", "--version"}},
	// AssemblyScript: the compiler version is pinned by the template's package-lock.json.
}

// pnToolchain reports what building lang's template needs and is missing (""), and the
// environment for its build.sh.
func pnToolchain(lang string) (missing string, env []string) {
	env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=", "GOWORK=off")
	need := map[string][]string{
		"c":              {"clang", "wasm-ld"},
		"go":             {"go"},
		"assemblyscript": {"node", "npm"},
	}[lang]
	for _, tool := range need {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " (scripts/install-toolchains.sh)", nil
		}
	}
	if lang == "rust" {
		// Debian's rustc has the wasm32 standard library; rustup's may not.
		for _, rustc := range []string{os.Getenv("RUSTC"), "/usr/bin/rustc", "rustc"} {
			if rustc == "" {
				continue
			}
			sysroot, err := exec.Command(rustc, "--print", "sysroot").Output()
			if err != nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(sysroot)), "lib", "rustlib", "wasm32-unknown-unknown")); err == nil {
				return "", append(env, "RUSTC="+rustc)
			}
		}
		return "rustc with the wasm32-unknown-unknown target (Debian: rustc libstd-rust-dev-wasm32; scripts/install-toolchains.sh)", nil
	}
	return "", env
}

// pnPinnedHere reports whether this machine has the toolchain version that built the committed
// module of lang.
func pnPinnedHere(lang string, env []string) bool {
	p, ok := pnPinned[lang]
	if !ok {
		return true
	}
	name := p.cmd[0]
	if name == "rustc" {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, "RUSTC="); ok {
				name = v
			}
		}
	}
	cmd := exec.Command(name, p.cmd[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return err == nil && strings.Contains(string(out), p.want)
}

func pnRequireToolchains() bool { return os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" }

// TestPluginNewBuilds is the whole path a user takes: `pctl plugin new` into a fresh directory,
// the project's one build command, then the module must pass the checks of pnCheckModule
// (including `pctl conformance` once it exists), and be the committed build byte for byte when
// the toolchain is the pinned one. A missing toolchain skips its language, or fails the test
// under PCTL_REQUIRE_TOOLCHAINS=1 (CI). The AssemblyScript build runs npm ci from the npm
// registry (the npm cache makes a second run fast).
func TestPluginNewBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds four plugins with their toolchains; not in -short")
	}
	keys := pnKeys(2, pnCheckKeys)
	results := make(map[string][]int32)
	var mu sync.Mutex
	t.Run("lang", func(t *testing.T) {
		for _, lang := range plugins.TemplateLangs() {
			t.Run(lang, func(t *testing.T) {
				t.Parallel()
				missing, env := pnToolchain(lang)
				if missing != "" {
					if pnRequireToolchains() {
						t.Fatalf("PCTL_REQUIRE_TOOLCHAINS=1 and the %s template needs %s", lang, missing)
					}
					t.Skipf("the %s template needs %s", lang, missing)
				}
				dir := filepath.Join(t.TempDir(), "project", lang)
				if code, _, errOut := pnRun(t, "plugin", "new", "--lang", lang, "--name", plugins.TemplateName, dir); code != exitOK {
					t.Fatalf("pctl plugin new: exit %d: %s", code, errOut)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				start := time.Now()
				cmd := exec.CommandContext(ctx, filepath.Join(dir, "build.sh"))
				cmd.Dir = t.TempDir() // build.sh must not depend on the working directory
				cmd.Env = env
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s/build.sh: %v\n%s", dir, err, out)
				}
				t.Logf("%s: build.sh took %v", lang, time.Since(start).Round(time.Millisecond))
				wasm, err := os.ReadFile(filepath.Join(dir, plugins.TemplateName+".wasm"))
				if err != nil {
					t.Fatalf("build.sh did not write %s.wasm: %v", plugins.TemplateName, err)
				}
				committed, err := plugins.TemplateModule(lang)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Equal(wasm, committed) {
					// Same bytes, same behaviour: TestTemplateModules checks them in full.
					r, err := pnPartitions(wasm, keys, 1000)
					if err != nil {
						t.Fatal(err)
					}
					mu.Lock()
					results[lang] = r
					mu.Unlock()
					return
				}
				msg := fmt.Sprintf("the build of the %s template (%d bytes, sha256:%s) is not the committed plugins/templates/%s/%s.wasm (%d bytes, sha256:%s)",
					lang, len(wasm), runtime.Digest(wasm)[:12], lang, plugins.TemplateName, len(committed), runtime.Digest(committed)[:12])
				if pnPinnedHere(lang, env) {
					t.Errorf("%s: run plugins/templates/rebuild.sh %s and commit the result", msg, lang)
				} else {
					t.Logf("%s; this machine's toolchain is not the pinned one, so that is expected", msg)
				}
				r := pnCheckModule(t, lang, plugins.TemplateName, wasm, keys)
				mu.Lock()
				results[lang] = r
				mu.Unlock()
			})
		}
	})
	pnRequireAgree(t, results, keys)
}

// TestPluginNewName: --name reaches every place the plugin's name appears (metadata, output file,
// package and module names), and nothing of the template's own name is left. The C project is
// built, as the quick end-to-end proof that a renamed project builds and says its new name.
func TestPluginNewName(t *testing.T) {
	const name = "tenant-hash"
	for _, lang := range plugins.TemplateLangs() {
		dir := filepath.Join(t.TempDir(), lang)
		code, out, errOut := pnRun(t, "plugin", "new", "--lang", lang, "--name", name, dir)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", lang, code, errOut)
		}
		if !strings.Contains(out, filepath.Join(dir, name+".wasm")) || !strings.Contains(out, "pctl conformance") {
			t.Errorf("%s: next steps do not name the module and pctl conformance:\n%s", lang, out)
		}
		found := false
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(plugins.TemplateName)) {
				t.Errorf("%s: %s still contains %q", lang, p, plugins.TemplateName)
			}
			// JSON in Go and AssemblyScript literals, escaped JSON in C and Rust strings.
			if bytes.Contains(b, []byte(`"name":"`+name+`"`)) || bytes.Contains(b, []byte(`\"name\":\"`+name+`\"`)) {
				found = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			t.Errorf("%s: no source declares the metadata name %q", lang, name)
		}
		if lang == "c" {
			if missing, env := pnToolchain(lang); missing == "" {
				cmd := exec.Command(filepath.Join(dir, "build.sh"))
				cmd.Env = env
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("build.sh: %v\n%s", err, out)
				}
				wasm, err := os.ReadFile(filepath.Join(dir, name+".wasm"))
				if err != nil {
					t.Fatal(err)
				}
				if m := pnLoad(t, wasm); m.Metadata.Name != name {
					t.Errorf("built module is named %q, want %q", m.Metadata.Name, name)
				}
			} else if pnRequireToolchains() {
				t.Errorf("PCTL_REQUIRE_TOOLCHAINS=1 and the c template needs %s", missing)
			}
		}
	}
}

// TestPluginNewFiles: the files written, their modes, go.mod under its real name.
func TestPluginNewFiles(t *testing.T) {
	want := map[string][]string{
		"c":              {"README.md", "build.sh", "partitioner.c", "pctl_abi.h"},
		"go":             {"README.md", "build.sh", "go.mod", "main.go"},
		"rust":           {"README.md", "build.sh", "src/lib.rs"},
		"assemblyscript": {".gitignore", "README.md", "assembly/index.ts", "assembly/tsconfig.json", "build.sh", "package-lock.json", "package.json"},
	}
	for _, lang := range plugins.TemplateLangs() {
		// Parents are created; the default name is the directory's last element.
		dir := filepath.Join(t.TempDir(), "a", "b", "user-shard")
		if code, _, errOut := pnRun(t, "plugin", "new", "--lang", lang, dir); code != exitOK {
			t.Fatalf("%s: exit %d: %s", lang, code, errOut)
		}
		var got []string
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				got = append(got, filepath.ToSlash(rel))
				fi, _ := d.Info()
				isExec := fi.Mode().Perm()&0o100 != 0
				if isExec != strings.HasSuffix(p, ".sh") {
					t.Errorf("%s: %s has mode %v", lang, rel, fi.Mode())
				}
			}
			return nil
		})
		slices.Sort(got)
		if !slices.Equal(got, want[lang]) {
			t.Errorf("%s: wrote %v, want %v", lang, got, want[lang])
		}
		if lang == "go" {
			if b, _ := os.ReadFile(filepath.Join(dir, "go.mod")); !strings.HasPrefix(string(b), "module example.com/user-shard\n") {
				t.Errorf("go.mod is %q", b)
			}
		}
	}
	// An existing empty directory is fine.
	empty := t.TempDir()
	if code, _, errOut := pnRun(t, "plugin", "new", "--lang", "c", "--name", "x", empty); code != exitOK {
		t.Errorf("empty existing dir: exit %d: %s", code, errOut)
	}
}

// TestPluginNewUsage: every refusal is a usage error (2) that says what to do, and nothing is
// written.
func TestPluginNewUsage(t *testing.T) {
	base := t.TempDir()
	full := filepath.Join(base, "full")
	os.MkdirAll(full, 0o755)
	os.WriteFile(filepath.Join(full, "keep.txt"), []byte("mine"), 0o644)
	file := filepath.Join(base, "file")
	os.WriteFile(file, []byte("x"), 0o644)
	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"no lang", []string{filepath.Join(base, "a")}, "--lang is required"},
		{"unknown lang", []string{"--lang", "cobol", filepath.Join(base, "a")}, "assemblyscript, c, go, rust"},
		{"no dir", []string{"--lang", "c"}, "exactly one directory"},
		{"two dirs", []string{"--lang", "c", filepath.Join(base, "a"), filepath.Join(base, "b")}, "exactly one directory"},
		{"not empty", []string{"--lang", "go", full}, "not empty"},
		{"a file", []string{"--lang", "go", file}, "not a directory"},
		{"bad name", []string{"--lang", "c", "--name", "My_Plugin", filepath.Join(base, "a")}, "--name"},
		{"bad derived name", []string{"--lang", "c", filepath.Join(base, "My_Plugin")}, "give one with --name"},
		{"bad flag", []string{"--lang", "c", "--nmae", "x", filepath.Join(base, "a")}, "unknown flag --nmae; did you mean --name?"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := pnRun(t, append([]string{"plugin", "new"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, tc.want)
			}
		})
	}
	entries, _ := os.ReadDir(base)
	if len(entries) != 2 {
		t.Errorf("refused commands wrote into %s: %v", base, entries)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "keep.txt")); string(b) != "mine" {
		t.Errorf("a file in a non-empty directory was touched")
	}
	code, out, _ := pnRun(t, "plugin", "new", "--help")
	if code != exitOK || !strings.Contains(out, "Usage: pctl plugin new --lang") || !strings.Contains(out, "pctl conformance") {
		t.Errorf("--help: exit %d:\n%s", code, out)
	}
	if code, out, _ := pnRun(t, "plugin", "--help"); code != exitOK || !strings.Contains(out, "new ") {
		t.Errorf("pctl plugin --help does not list new: exit %d:\n%s", code, out)
	}
}

// TestTemplateEmbed: every source file of plugins/templates/<lang> is embedded (a file added to
// a template but not to the go:embed list in plugins/templates.go would be missing from new
// projects), and the C template's pctl_abi.h is the repository's.
func TestTemplateEmbed(t *testing.T) {
	root := filepath.Join("..", "..", "plugins")
	for _, lang := range plugins.TemplateLangs() {
		tmpl, err := plugins.Template(lang)
		if err != nil {
			t.Fatal(err)
		}
		var embedded, onDisk []string
		fs.WalkDir(tmpl, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				embedded = append(embedded, p)
			}
			return err
		})
		dir := filepath.Join(root, "templates", lang)
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !d.IsDir() && filepath.Ext(p) != ".wasm" {
				rel, _ := filepath.Rel(dir, p)
				onDisk = append(onDisk, filepath.ToSlash(rel))
			}
			return nil
		})
		slices.Sort(embedded)
		slices.Sort(onDisk)
		if !slices.Equal(embedded, onDisk) {
			t.Errorf("%s: embedded %v, on disk %v: update the go:embed list in plugins/templates.go", lang, embedded, onDisk)
		}
	}
	want, err := os.ReadFile(filepath.Join(root, "include", "pctl_abi.h"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, _ := plugins.Template("c")
	got, err := fs.ReadFile(tmpl, "pctl_abi.h")
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("plugins/templates/c/pctl_abi.h differs from plugins/include/pctl_abi.h (%v): copy it over", err)
	}
	if _, err := plugins.Template("cobol"); err == nil {
		t.Errorf("Template(cobol): no error")
	}
}
