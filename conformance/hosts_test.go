package conformance_test

// TestHosts is "one vector runner, many engines" (GitHub issue 3, part 2): the same modules and
// keys through wazero's compiler and interpreter (the Go reference host, runtime/) and through
// every host in another language under conformance/hosts/, with identical output required, and
// every hostile module refused or stopped with its documented error class everywhere. The hosts'
// command-line convention is conformance/hosts/README.md; a directory there with executable
// `setup` and `run` files joins this test without any code here. The engines of requiredEngines
// (wazero's two, V8, wasmtime, Chicory) must all take part with PCTL_REQUIRE_TOOLCHAINS=1, and
// the run says which took part.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
	"pctl.dev/pctl/spec/vectors"
)

// Partition counts of the agreement runs. A host gets one process per (module, config, n): every
// key of spec/vectors/keys.txt at each n of hostNs, and the random keys too at each n of randomNs.
// The Go engines also run every vector case at its own n (all of keys.txt's counts).
var (
	hostNs   = []int32{1, 7, 1000, 2147483647}
	randomNs = map[int32]bool{1: true, 1000: true, 2147483647: true}
)

const (
	hostRandomKeys     = 100_000 // seeded random keys of 0 to hostRandomMaxLen bytes
	hostRandomMaxLen   = 32      // keys.txt already has 2000 random keys of up to 300 bytes, and long ones
	hostRaceInterpKeys = 500     // keys.txt keys and random keys the wazero interpreter gets under -race
	hostRunTimeout     = 3 * time.Minute
	hostSetupTimeout   = 15 * time.Minute
)

// templateConfigs are the --config flag sets every template build runs with (the templates'
// READMEs: an optional decimal "seed").
var templateConfigs = [][]string{nil, {"seed=42"}}

// confHost is one directory of conformance/hosts.
type confHost struct {
	name, dir string
}

// requiredEngine is a WebAssembly engine TestHosts must run: the two wazero engines in this
// process, every other one through its conformance/hosts directory. With
// PCTL_REQUIRE_TOOLCHAINS=1 (CI) TestHosts fails when any of them cannot take part; otherwise it
// says loudly which did not, since a run without them compares wazero with itself only.
type requiredEngine struct {
	name string
	host string // the conformance/hosts directory; "" for an engine in this process
}

var requiredEngines = []requiredEngine{
	{"wazero compiler", ""},
	{"wazero interpreter", ""},
	{"V8 (Node.js)", "node"},
	{"wasmtime (Python)", "python"},
	{"Chicory (Java)", "java"},
}

// discoverHosts lists the directories of root with executable setup and run files, and says
// why each other directory is not a host.
func discoverHosts(t *testing.T, root string) (hosts []*confHost, broken map[string]string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	broken = map[string]string{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(root, e.Name())
		var why []string
		for _, f := range []string{"setup", "run"} {
			fi, err := os.Stat(filepath.Join(d, f))
			switch {
			case err != nil:
				why = append(why, fmt.Sprintf("no %s file (%v)", f, err))
			case fi.IsDir() || fi.Mode()&0o111 == 0:
				why = append(why, fmt.Sprintf("%s is not an executable file (mode %v)", f, fi.Mode()))
			}
		}
		if len(why) > 0 {
			broken[e.Name()] = strings.Join(why, "; ")
			continue
		}
		abs, err := filepath.Abs(d)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, &confHost{name: e.Name(), dir: abs})
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].name < hosts[j].name })
	return hosts, broken
}

// missingEngines says, for each required engine that will not take part, why (ready: the hosts
// whose setup succeeded; broken: why the other directories are not ready).
func missingEngines(ready []*confHost, broken map[string]string) []string {
	have := map[string]bool{}
	for _, h := range ready {
		have[h.name] = true
	}
	var out []string
	for _, e := range requiredEngines {
		switch {
		case e.host == "" || have[e.host]:
		case broken[e.host] != "":
			out = append(out, fmt.Sprintf("%s (conformance/hosts/%s): %s", e.name, e.host, broken[e.host]))
		default:
			out = append(out, fmt.Sprintf("%s (conformance/hosts/%s): no such directory", e.name, e.host))
		}
	}
	return out
}

// setupHosts runs every host's setup at once. It returns the hosts that are ready, and why each
// other one is not.
func setupHosts(t *testing.T, hosts []*confHost) ([]*confHost, map[string]string) {
	reasons := make([]string, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), hostSetupTimeout)
			defer cancel()
			start := time.Now()
			cmd := exec.CommandContext(ctx, filepath.Join(h.dir, "setup"))
			cmd.Dir = h.dir
			out, err := cmd.CombinedOutput()
			if err != nil {
				reasons[i] = fmt.Sprintf("setup failed: %v after %v: %s", err, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
				return
			}
			t.Logf("host %s: setup in %v", h.name, time.Since(start).Round(time.Millisecond))
		}()
	}
	wg.Wait()
	var ready []*confHost
	failed := map[string]string{}
	for i, h := range hosts {
		if reasons[i] == "" {
			ready = append(ready, h)
		} else {
			failed[h.name] = reasons[i]
		}
	}
	return ready, failed
}

// takePart discovers and sets up the hosts, and decides what happens to the engines that cannot
// take part: a failure with PCTL_REQUIRE_TOOLCHAINS=1, else a skipped subtest for each and a
// loud log line.
func takePart(t *testing.T) []*confHost {
	found, broken := discoverHosts(t, "hosts")
	hosts, failed := setupHosts(t, found)
	for name, why := range failed {
		broken[name] = why
	}
	missing := missingEngines(hosts, broken)
	names := []string{"wazero compiler", "wazero interpreter"}
	for _, h := range hosts {
		names = append(names, "hosts/"+h.name)
	}
	t.Logf("engines taking part: %s", strings.Join(names, ", "))
	require := os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1"
	for _, m := range missing {
		if require {
			t.Errorf("required engine missing (PCTL_REQUIRE_TOOLCHAINS=1): %s", m)
		}
	}
	if len(missing) > 0 && !require {
		t.Logf("ENGINES MISSING: %s. This run does not compare against them (with PCTL_REQUIRE_TOOLCHAINS=1 it fails)", strings.Join(missing, "; "))
		for name, why := range broken {
			t.Run("hosts/"+name, func(t *testing.T) { t.Skipf("not ready: %s", why) })
		}
	}
	for name, why := range broken {
		if require && !isRequiredHost(name) {
			t.Errorf("host %s is not ready (PCTL_REQUIRE_TOOLCHAINS=1): %s", name, why)
		}
	}
	return hosts
}

func isRequiredHost(name string) bool {
	for _, e := range requiredEngines {
		if e.host == name {
			return true
		}
	}
	return false
}

type hostRun struct {
	stdout []byte
	stderr string
	exit   int
	took   time.Duration // wall clock
	cpu    time.Duration // user + system time of the host's processes
}

// run executes `<host>/run run ARGS...` with stdin. The leading "run" is the command's name,
// which the convention allows (conformance/hosts/README.md).
func (h *confHost) run(t *testing.T, args []string, stdin []byte) hostRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hostRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.dir, "run"), append([]string{"run"}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := hostRun{stdout: stdout.Bytes(), stderr: stderr.String(), took: time.Since(start)}
	if ps := cmd.ProcessState; ps != nil {
		r.cpu = ps.UserTime() + ps.SystemTime()
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("host %s: run %s did not finish within %v: the host must stop every module (stderr: %s)", h.name, strings.Join(args, " "), hostRunTimeout, r.stderr)
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("host %s: cannot start run: %v", h.name, err)
	}
	return r
}

func runArgs(wasm string, n string, flags []string) []string {
	args := []string{"--wasm", wasm, "--partitions", n}
	for _, f := range flags {
		args = append(args, "--config", f)
	}
	return args
}

func hexStdin(keys [][]byte) []byte {
	var b bytes.Buffer
	b.Grow(len(keys) * 40)
	dst := make([]byte, 0, 256)
	for _, k := range keys {
		dst = hex.AppendEncode(dst[:0], k)
		b.Write(dst)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// parsePartitions reads a host's stdout: one decimal partition per line.
func parsePartitions(out []byte) ([]int32, error) {
	s := strings.TrimSuffix(string(out), "\n")
	if s == "" {
		return nil, nil
	}
	lines := strings.Split(s, "\n")
	parts := make([]int32, len(lines))
	for i, l := range lines {
		v, err := strconv.ParseInt(l, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("stdout line %d: %q is not a partition", i+1, l)
		}
		parts[i] = int32(v)
	}
	return parts, nil
}

// --- modules -------------------------------------------------------------------------------------

// hostModule is one row of the agreement table. Every module with the same group and config must
// give the same partitions; a module with vectors must match that spec/vectors file.
type hostModule struct {
	name    string // e.g. builtin/jump, murmur2/go, template/c
	wasm    []byte
	path    string // the bytes in a file, for the hosts
	vectors string // a spec/vectors partitioner, or ""
	group   string
	configs [][]string // --config flag sets; nil: no config
}

// moduleTable lists every module the engines must agree on: the built-ins, the four kafka-murmur2
// builds and, when built, the templates (plugins/templates/<lang>/*.wasm).
func moduleTable(t *testing.T) []*hostModule {
	dir := t.TempDir()
	var mods []*hostModule
	add := func(m *hostModule) {
		m.path = filepath.Join(dir, strings.ReplaceAll(m.name, "/", "_")+".wasm")
		if err := os.WriteFile(m.path, m.wasm, 0o644); err != nil {
			t.Fatal(err)
		}
		if m.configs == nil {
			m.configs = [][]string{nil}
		}
		mods = append(mods, m)
	}
	for _, name := range plugins.BuiltinNames() {
		wasm, ok := plugins.Builtin(name)
		if !ok {
			t.Fatalf("plugins.Builtin(%q) is missing", name)
		}
		add(&hostModule{name: "builtin/" + name, wasm: wasm, vectors: name, group: name})
	}
	builds := plugins.Murmur2Builds()
	var toolchains []string
	for tc := range builds {
		toolchains = append(toolchains, tc)
	}
	sort.Strings(toolchains)
	for _, tc := range toolchains {
		if tc == "c" {
			continue // the built-in kafka-murmur2 itself
		}
		add(&hostModule{name: "murmur2/" + tc, wasm: builds[tc], vectors: "kafka-murmur2", group: "kafka-murmur2"})
	}
	templates, _ := filepath.Glob(filepath.Join("..", "plugins", "templates", "*", "*.wasm"))
	sort.Strings(templates)
	for _, p := range templates {
		wasm, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		name := "template/" + filepath.Base(filepath.Dir(p))
		if base := strings.TrimSuffix(filepath.Base(p), ".wasm"); base != plugins.TemplateName {
			name += "/" + base
		}
		add(&hostModule{name: name, wasm: wasm, group: "template", configs: templateConfigs})
	}
	if len(templates) == 0 {
		t.Logf("no template builds (plugins/templates/*/*.wasm): templates are not in the agreement table")
	}
	return mods
}

// keySet is the stdin of one agreement run: every keys.txt key, then the random keys if any.
type keySet struct {
	n     int32
	keys  [][]byte
	nVec  int // keys[:nVec] are keys.txt's
	stdin []byte
}

func hostRandomKeySet(seed uint64, count int) [][]byte {
	r := rand.New(rand.NewPCG(seed, 0x686f737473))
	keys := make([][]byte, count)
	arena := make([]byte, 0, count*(hostRandomMaxLen/2+1))
	for i := range keys {
		n := r.IntN(hostRandomMaxLen + 1)
		start := len(arena)
		for j := 0; j < n; j++ {
			arena = append(arena, byte(r.Uint32()))
		}
		keys[i] = arena[start:len(arena):len(arena)]
	}
	return keys
}

// vectorKeys returns the distinct keys of keys.txt, in order (every vector file lists the same
// keys, in the order of keys.txt).
func vectorKeys(t *testing.T) [][]byte {
	f, err := vectors.Load("kafka-murmur2")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var keys [][]byte
	for _, c := range f.Cases {
		if !seen[string(c.Key)] {
			seen[string(c.Key)] = true
			keys = append(keys, c.Key)
		}
	}
	return keys
}

func buildKeySets(t *testing.T) map[int32]*keySet {
	vk := vectorKeys(t)
	random := hostRandomKeySet(2026, hostRandomKeys)
	sets := map[int32]*keySet{}
	for _, n := range hostNs {
		ks := &keySet{n: n, keys: append([][]byte(nil), vk...), nVec: len(vk)}
		if randomNs[n] {
			ks.keys = append(ks.keys, random...)
		}
		ks.stdin = hexStdin(ks.keys)
		sets[n] = ks
	}
	return sets
}

// --- the Go engines --------------------------------------------------------------------------------

type goEngine struct {
	name string
	rt   *runtime.Runtime

	mu    sync.Mutex
	pools map[string]*runtime.Pool // by digest and config, for the agreement runs
}

func newGoEngines(t *testing.T) []*goEngine {
	var out []*goEngine
	for _, kind := range []runtime.Engine{runtime.EngineCompiler, runtime.EngineInterpreter} {
		rt, err := runtime.New(context.Background(), runtime.Config{Engine: kind})
		if err != nil {
			t.Fatal(err)
		}
		e := &goEngine{name: "wazero-" + kind.String(), rt: rt, pools: map[string]*runtime.Pool{}}
		t.Cleanup(func() {
			for _, p := range e.pools {
				p.Close()
			}
			rt.Close(context.Background())
		})
		out = append(out, e)
	}
	return out
}

// partitions runs keys through the engine's pool of the module with the config flags. The pool
// is made once per module and config: instances of Go-built modules take a while to initialise,
// seconds on the interpreter under -race.
func (e *goEngine) partitions(wasm []byte, flags []string, keys [][]byte, n int32) ([]int32, error) {
	cfg, err := partitioner.EncodeConfig(flags)
	if err != nil {
		return nil, err
	}
	key := runtime.Digest(wasm) + "\x00" + string(cfg)
	e.mu.Lock()
	pool, ok := e.pools[key]
	if !ok {
		var m *runtime.Module
		if m, err = e.rt.Load(context.Background(), wasm); err == nil {
			if pool, err = m.NewPool(context.Background(), cfg, runtime.PoolOptions{Size: 2}); err == nil {
				e.pools[key] = pool
			}
		}
	}
	e.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]int32, len(keys))
	if err := pool.PartitionBatch(keys, n, out); err != nil {
		return nil, err
	}
	return out, nil
}

// fresh runs keys through a new pool of the module with the config bytes themselves: for the
// hostile cases, where a module may fail at load, at configure or on a key.
func (e *goEngine) fresh(wasm []byte, flags []string, raw []byte, keys [][]byte, n int32) ([]int32, error) {
	ctx := context.Background()
	cfg := raw
	if raw == nil {
		var err error
		if cfg, err = partitioner.EncodeConfig(flags); err != nil {
			return nil, err
		}
	}
	m, err := e.rt.Load(ctx, wasm)
	if err != nil {
		return nil, err
	}
	pool, err := m.NewPool(ctx, cfg, runtime.PoolOptions{Size: 1})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	out := make([]int32, len(keys))
	if err := pool.PartitionBatch(keys, n, out); err != nil {
		return nil, err
	}
	return out, nil
}

// raceSkip says why the engine skips a module under -race: the wazero interpreter is Go code, and
// the race detector makes a Go-built module's initialisation on it take seconds per instance.
// Without -race every engine runs every module.
func (e *goEngine) raceSkip(wasm []byte) bool {
	if !hostsRace || e.name != "wazero-"+runtime.EngineInterpreter.String() {
		return false
	}
	m, err := e.rt.Load(context.Background(), wasm)
	return err == nil && m.Profile == runtime.ProfileWASIDeterministic
}

func configName(flags []string) string {
	if len(flags) == 0 {
		return "no config"
	}
	return "--config " + strings.Join(flags, " --config ")
}

// firstDiff describes the first mismatches of got against want, for keys.
func firstDiff(keys [][]byte, n int32, got, want []int32, vec map[string]int32) string {
	var b strings.Builder
	shown := 0
	for i := range want {
		if got[i] == want[i] {
			continue
		}
		if shown == 3 {
			b.WriteString("\n    ...")
			break
		}
		shown++
		fmt.Fprintf(&b, "\n    key %d %q (hex %s), n=%d: got %d, wazero compiler %d", i, truncKey(keys[i]), truncHex(keys[i]), n, got[i], want[i])
		if p, ok := vec[vecKey(keys[i], n)]; ok {
			fmt.Fprintf(&b, ", reference %d", p)
		}
	}
	return b.String()
}

func truncKey(k []byte) []byte {
	if len(k) > 16 {
		return k[:16]
	}
	return k
}

func truncHex(k []byte) string {
	if len(k) > 16 {
		return hex.EncodeToString(k[:16]) + "..."
	}
	return hex.EncodeToString(k)
}

func vecKey(key []byte, n int32) string { return strconv.Itoa(int(n)) + ":" + string(key) }

// --- the test ----------------------------------------------------------------------------------------

func TestHosts(t *testing.T) {
	start := time.Now()
	hosts := takePart(t)
	if t.Failed() {
		t.FailNow()
	}

	mods := moduleTable(t)
	sets := buildKeySets(t)
	engines := newGoEngines(t)
	compiler, interp := engines[0], engines[1]
	vecs := map[string]map[string]int32{} // vector file -> vecKey -> partition
	for _, m := range mods {
		if m.vectors != "" && vecs[m.vectors] == nil {
			f, err := vectors.Load(m.vectors)
			if err != nil {
				t.Fatal(err)
			}
			mv := map[string]int32{}
			for _, c := range f.Cases {
				mv[vecKey(c.Key, c.N)] = c.Partition
			}
			vecs[m.vectors] = mv
		}
	}

	// Everything below runs at once, each check in its own goroutine (t.Run may be called
	// concurrently; t.Parallel would queue them behind -parallel, GOMAXPROCS by default, although
	// the hosts' subtests mostly wait for their processes).
	var wg sync.WaitGroup
	spawn := func(name string, f func(t *testing.T)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, f)
		}()
	}
	defer wg.Wait()

	// The reference: the wazero compiler's partitions for every (module, config, n) of the host
	// runs, checked against spec/vectors by the "vectors" check. The hosts start their processes
	// meanwhile and compare when it is ready.
	type mcKey struct {
		mod    *hostModule
		config string
		n      int32
	}
	ref := map[mcKey][]int32{}
	refReady := make(chan struct{})
	refOK := false
	reference := func(t *testing.T) bool {
		t.Helper()
		<-refReady
		if !refOK {
			t.Skip("no reference partitions: see the reference failure of TestHosts")
		}
		return true
	}
	// Not a subtest, so that -run never filters it out from under the checks that wait for it;
	// it reports on TestHosts itself.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(refReady)
		refStart := time.Now()
		for _, m := range mods {
			for _, flags := range m.configs {
				for _, n := range hostNs {
					got, err := compiler.partitions(m.wasm, flags, sets[n].keys, n)
					if err != nil {
						t.Errorf("reference: %s (%s) on %s, n=%d: %v", m.name, configName(flags), compiler.name, n, err)
						return
					}
					ref[mcKey{m, configName(flags), n}] = got
				}
			}
		}
		t.Logf("wazero compiler: reference partitions in %v", time.Since(refStart).Round(time.Millisecond))
		// Modules of one group (the kafka-murmur2 builds, the templates) agree with each other.
		firstOf := map[string]*hostModule{}
		for _, m := range mods {
			f := firstOf[m.group]
			if f == nil {
				firstOf[m.group] = m
				continue
			}
			for _, flags := range m.configs {
				for _, n := range hostNs {
					a, b := ref[mcKey{m, configName(flags), n}], ref[mcKey{f, configName(flags), n}]
					if b == nil {
						t.Errorf("%s runs with %s but %s of its group %q does not", m.name, configName(flags), f.name, m.group)
						continue
					}
					if d := firstDiff(sets[n].keys, n, a, b, nil); d != "" {
						t.Errorf("%s disagrees with %s (group %q, %s) on the wazero compiler; \"got\" is %s:%s", m.name, f.name, m.group, configName(flags), m.name, d)
					}
				}
			}
		}
		refOK = true
	}()

	// Every vector case at its own n: a mismatch means keys remap for existing users of the
	// reference client. Under -race the compiler only: the interpreter's agreement with it is
	// checked below on a sample.
	spawn("engines/vectors", func(t *testing.T) {
		for _, m := range mods {
			if m.vectors == "" {
				continue
			}
			f, err := vectors.Load(m.vectors)
			if err != nil {
				t.Fatal(err)
			}
			byN := map[int32][]vectors.Case{}
			for _, c := range f.Cases {
				byN[c.N] = append(byN[c.N], c)
			}
			for _, e := range engines {
				if hostsRace && e == interp {
					continue
				}
				for n, cases := range byN {
					keys := make([][]byte, len(cases))
					for i, c := range cases {
						keys[i] = c.Key
					}
					got, err := e.partitions(m.wasm, nil, keys, n)
					if err != nil {
						t.Fatalf("%s on %s, n=%d: %v", m.name, e.name, n, err)
					}
					for i, c := range cases {
						if got[i] != c.Partition {
							t.Errorf("%s on %s: key %s, n=%d: got %d, reference (%s) says %d: keys would remap for existing users", m.name, e.name, truncHex(c.Key), n, got[i], m.vectors, c.Partition)
							break
						}
					}
				}
			}
		}
	})

	// The interpreter gives the compiler's partitions: every key without -race, a sample with it.
	spawn("engines/wazero-interpreter", func(t *testing.T) {
		reference(t)
		for _, m := range mods {
			if interp.raceSkip(m.wasm) {
				t.Logf("%s: skipped under -race (a Go-built module; the run without -race covers it)", m.name)
				continue
			}
			for _, flags := range m.configs {
				for _, n := range hostNs {
					keys, want := sets[n].keys, ref[mcKey{m, configName(flags), n}]
					if hostsRace {
						keys, want = raceSample(keys, sets[n].nVec), raceSample(want, sets[n].nVec)
					}
					got, err := interp.partitions(m.wasm, flags, keys, n)
					if err != nil {
						t.Errorf("%s (%s), n=%d: %v", m.name, configName(flags), n, err)
						continue
					}
					if d := firstDiff(keys, n, got, want, vecs[m.vectors]); d != "" {
						t.Errorf("%s (%s): the interpreter disagrees with the compiler:%s", m.name, configName(flags), d)
					}
				}
			}
		}
	})

	spawn("engines/hostile", func(t *testing.T) {
		for _, e := range engines {
			for _, hc := range hostileCases(mods) {
				if hc.slow && e == interp {
					continue // minutes each on the interpreter; runtime/hostile_test.go covers wazero
				}
				t.Run(e.name+"/"+hc.name, func(t *testing.T) { hc.checkGo(t, e) })
			}
		}
	})

	// Under -race the hosts in other languages are set up (a missing one still fails with
	// PCTL_REQUIRE_TOOLCHAINS=1) but not run: the race detector sees nothing of another process,
	// and the run without -race (scripts/test.sh runs TestHosts there too) runs every one of
	// them on every module and key.
	runHosts := hosts
	if hostsRace {
		t.Logf("under -race: the %d hosts in other languages are ready but not run; the run without -race runs them", len(hosts))
		runHosts = nil
	}
	for _, h := range runHosts {
		spawn("hosts/"+h.name, func(t *testing.T) {
			hostStart := time.Now()
			t.Run("agreement", func(t *testing.T) {
				type result struct {
					m     *hostModule
					flags []string
					n     int32
					r     hostRun
				}
				var results []result
				var slowest, cpu time.Duration
				var slowestWhat string
				for _, m := range mods {
					for _, flags := range m.configs {
						for _, n := range hostNs {
							r := h.run(t, runArgs(m.path, strconv.Itoa(int(n)), flags), sets[n].stdin)
							cpu += r.cpu
							if r.took > slowest {
								slowest, slowestWhat = r.took, fmt.Sprintf("%s (%s), n=%d", m.name, configName(flags), n)
							}
							results = append(results, result{m, flags, n, r})
						}
					}
				}
				t.Logf("host %s: %d runs in %v, %v of CPU; slowest %v (%s)", h.name, len(results), time.Since(hostStart).Round(time.Millisecond), cpu.Round(time.Millisecond), slowest.Round(time.Millisecond), slowestWhat)
				reference(t)
				for _, res := range results {
					m, flags, n, r := res.m, res.flags, res.n, res.r
					ks := sets[n]
					if r.exit != 0 {
						t.Errorf("%s (%s), n=%d: exit %d: %s", m.name, configName(flags), n, r.exit, strings.TrimSpace(r.stderr))
						continue
					}
					got, err := parsePartitions(r.stdout)
					if err != nil || len(got) != len(ks.keys) {
						t.Errorf("%s (%s), n=%d: %d partitions for %d keys (%v)", m.name, configName(flags), n, len(got), len(ks.keys), err)
						continue
					}
					if d := firstDiff(ks.keys, n, got, ref[mcKey{m, configName(flags), n}], vecs[m.vectors]); d != "" {
						t.Errorf("%s (%s) on host %s: the same module gives other partitions than on wazero:%s", m.name, configName(flags), h.name, d)
					}
				}
			})
			t.Run("hostile", func(t *testing.T) {
				for _, hc := range hostileCases(mods) {
					t.Run(hc.name, func(t *testing.T) { hc.checkHost(t, h) })
				}
			})
			// A host's own unit tests (its WASI shims against spec/vectors/wasi-random.json, its
			// config encoding...), when it has an executable `test`.
			if fi, err := os.Stat(filepath.Join(h.dir, "test")); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				t.Run("unit", func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), hostRunTimeout)
					defer cancel()
					cmd := exec.CommandContext(ctx, filepath.Join(h.dir, "test"))
					cmd.Dir = h.dir
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Errorf("host %s: %s/test: %v\n%s", h.name, h.name, err, out)
					}
				})
			}
			t.Logf("host %s: %v in all", h.name, time.Since(hostStart).Round(time.Millisecond))
		})
	}
	wg.Wait()
	t.Logf("TestHosts: %d modules, %d partition counts, %d random keys, %d hosts; %v in all", len(mods), len(hostNs), hostRandomKeys, len(hosts), time.Since(start).Round(time.Millisecond))
}

// raceSample keeps the first hostRaceInterpKeys keys of keys.txt (s[:nVec]) and the first
// hostRaceInterpKeys random keys (s[nVec:]).
func raceSample[T any](s []T, nVec int) []T {
	out := append([]T(nil), s[:min(nVec, hostRaceInterpKeys)]...)
	return append(out, s[nVec:min(len(s), nVec+hostRaceInterpKeys)]...)
}

// --- hostile modules and refusals ------------------------------------------------------------------

// hostileCase is one row of the error-class table: a module (runtime/testdata/hostile, see its
// README.md, or one of the agreement table), keys and flags, and what every engine must do.
type hostileCase struct {
	name  string
	file  string   // path from this directory
	keys  []string // hex
	n     string   // --partitions
	flags []string // --config
	exit  int      // 0: every key gets a partition; 1: module failure at run time; 2: refused
	want  []int32  // exit 0: the partitions (nil: any partition in [0, n))
	goErr error    // the Go runtime's sentinel for exit != 0
	says  []string // stderr must contain each, case-insensitively: the class, and what it names
	slow  bool     // spends the whole work budget: compiler only among the wazero engines
	// configHex, when set, is raw config bytes that no --config flag can produce, given to the
	// hosts as --config-hex and to the wazero engines as they are.
	configHex string
}

const hostileDir = "../runtime/testdata/hostile"

func hostileCases(mods []*hostModule) []hostileCase {
	h := func(name string) string { return filepath.Join(hostileDir, name+".wasm") }
	cases := []hostileCase{
		{name: "not-wasm", file: h("not-wasm"), exit: 2, goErr: runtime.ErrNotWasm, says: []string{"not a WebAssembly module"}},
		{name: "truncated", file: h("truncated"), exit: 2, goErr: runtime.ErrInvalidModule, says: []string{"invalid WebAssembly module"}},
		{name: "oversize", file: h("oversize"), exit: 2, goErr: runtime.ErrModuleTooLarge, says: []string{"module too large", "8388608"}},
		{name: "forbidden-import", file: h("forbidden-import"), exit: 2, goErr: runtime.ErrForbiddenImport, says: []string{"forbidden import", "env.now"}},
		{name: "forbidden-wasi-import", file: h("forbidden-wasi-import"), exit: 2, goErr: runtime.ErrForbiddenImport, says: []string{"forbidden import", "wasi_snapshot_preview1.fd_read"}},
		{name: "wasi-wrong-signature", file: h("wasi-wrong-signature"), exit: 2, goErr: runtime.ErrForbiddenImport, says: []string{"forbidden import", "random_get", "(i32) -> (i32)", "(i32, i32) -> (i32)"}},
		{name: "missing-export", file: h("missing-export"), exit: 2, goErr: runtime.ErrMissingExport, says: []string{"missing export", "pctl_partition", "(i32, i32) -> (i32)"}},
		{name: "bad-signature", file: h("bad-signature"), exit: 2, goErr: runtime.ErrBadSignature, says: []string{"wrong signature", "pctl_partition", "(i32) -> (i32)", "(i32, i32) -> (i32)"}},
		{name: "abi-v2", file: h("abi-v2"), exit: 2, goErr: runtime.ErrUnsupportedABI, says: []string{"unsupported ABI version", "version 2", "supports 1"}},
		{name: "memory-initial", file: h("memory-initial"), exit: 2, goErr: runtime.ErrMemoryLimit, says: []string{"memory limit", "513"}},
		{name: "loop-forever", file: h("loop-forever"), exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "loop-forever"}, slow: true},
		{name: "exponential", file: h("exponential"), exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "exponential"}, slow: true},
		{name: "memory-grow", file: h("memory-grow"), exit: 1, goErr: runtime.ErrMemoryLimit, says: []string{"memory limit", "memory-grow"}},
		{name: "recurse", file: h("recurse"), exit: 1, goErr: runtime.ErrCallDepth, says: []string{"call stack exhausted", "recurse"}},
		{name: "trap-some-keys/ff", file: h("trap-some-keys"), keys: []string{"00", "ff01"}, exit: 1, goErr: runtime.ErrTrap, says: []string{"trap", "trap-some-keys"}},
		{name: "trap-some-keys/others", file: h("trap-some-keys"), keys: []string{"00", "0102", "", "fe"}, exit: 0, want: []int32{1, 2, 0, 1}},
		{name: "out-of-range", file: h("out-of-range"), keys: []string{"00"}, exit: 1, goErr: runtime.ErrOutOfRange, says: []string{"out of range", "out-of-range"}},
		{name: "out-of-range/even", file: h("out-of-range"), keys: []string{"0001", ""}, exit: 0, want: []int32{2, 0}},
		{name: "proc-exit", file: h("proc-exit"), exit: 1, goErr: runtime.ErrExit, says: []string{"exited", "3", "proc-exit"}},
		{name: "rand-clock", file: h("rand-clock"), keys: []string{"", "00", "0102"}, exit: 0},
		{name: "config-echo/a=1", file: h("config-echo"), keys: []string{"", "00", "0102"}, flags: []string{"a=1"}, exit: 0, want: []int32{4, 5, 6}},
		{name: "config-echo/empty", file: h("config-echo"), keys: []string{"", "00"}, exit: 0, want: []int32{0, 1}},
		{name: "config-echo/rejected", file: h("config-echo"), configHex: "21", exit: 2, goErr: runtime.ErrConfigRejected, says: []string{"rejected", "config"}},
		{name: "config-echo/raw", file: h("config-echo"), keys: []string{""}, configHex: "00ff0a", exit: 0, want: []int32{3}},
		{name: "config/not-configurable", file: "builtin/kafka-murmur2", flags: []string{"a=1"}, exit: 2, goErr: runtime.ErrConfigUnsupported, says: []string{"takes no configuration"}},
		{name: "config/bad-key", file: h("config-echo"), flags: []string{"a b=1"}, exit: 2, goErr: partitioner.ErrBadConfig, says: []string{"config", "a b"}},
		{name: "config/twice", file: h("config-echo"), flags: []string{"a=1", "a=2"}, exit: 2, goErr: partitioner.ErrBadConfig, says: []string{"config", "twice"}},
		{name: "usage/n=0", file: "builtin/jump", n: "0", exit: 2, goErr: runtime.ErrInvalidPartitionCount, says: []string{"partitions"}},
		{name: "usage/n=2^31", file: "builtin/jump", n: "2147483648", exit: 2, goErr: runtime.ErrInvalidPartitionCount, says: []string{"partitions"}},
		{name: "usage/key-too-long", file: "builtin/jump", keys: []string{strings.Repeat("00", runtime.MaxKeyBytes+1)}, exit: 2, goErr: runtime.ErrKeyTooLong, says: []string{"65536"}},
		{name: "key-of-max-length", file: "builtin/kafka-murmur2", keys: []string{strings.Repeat("00", runtime.MaxKeyBytes), strings.Repeat("ff", runtime.MaxKeyBytes-1)}, n: "1000", exit: 0},

		// Issue 11. Bulk work is charged by its bytes (spec/abi-v1.md §7.2, rules 3 and 4): every
		// engine stops each of these calls with a time limit, and answers the other keys.
		{name: "bulk-memory/fill", file: h("bulk-memory"), keys: []string{"66"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-memory"}},
		{name: "bulk-memory/copy", file: h("bulk-memory"), keys: []string{"63"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-memory"}},
		{name: "bulk-memory/init", file: h("bulk-memory"), keys: []string{"69"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-memory"}},
		{name: "bulk-memory/others", file: h("bulk-memory"), keys: []string{"", "6161", "7a7a7a"}, exit: 0, want: []int32{0, 2, 3}},
		{name: "bulk-table/fill", file: h("bulk-table"), keys: []string{"46"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-table"}},
		{name: "bulk-table/copy", file: h("bulk-table"), keys: []string{"43"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-table"}},
		{name: "bulk-table/init", file: h("bulk-table"), keys: []string{"49"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-table"}},
		{name: "bulk-table/others", file: h("bulk-table"), keys: []string{"", "6161", "7a7a7a"}, exit: 0, want: []int32{0, 2, 3}},
		{name: "wasi-bulk/random_get", file: h("wasi-bulk"), keys: []string{"72"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "wasi-bulk"}},
		{name: "wasi-bulk/fd_write", file: h("wasi-bulk"), keys: []string{"77"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "wasi-bulk"}},
		{name: "wasi-bulk/poll_oneoff", file: h("wasi-bulk"), keys: []string{"70"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "wasi-bulk"}},
		{name: "wasi-bulk/sched_yield", file: h("wasi-bulk"), keys: []string{"79"}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "wasi-bulk"}},
		{name: "wasi-bulk/others", file: h("wasi-bulk"), keys: []string{"", "6161", "7a7a7a"}, exit: 0, want: []int32{0, 2, 3}},
		{name: "bulk-trigger/trigger", file: h("bulk-trigger"), keys: []string{hex.EncodeToString([]byte("hostile:freeze!!"))}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "bulk-trigger"}},
		{name: "bulk-trigger/others", file: h("bulk-trigger"), keys: []string{"", "6161", hex.EncodeToString([]byte("hostile:freeze!?"))}, n: "1000", exit: 0,
			want: []int32{int32(fnv1a32(nil) % 1000), int32(fnv1a32([]byte("aa")) % 1000), int32(fnv1a32([]byte("hostile:freeze!?")) % 1000)}},
		// The edge of the budget (fuel-edge.wat derives these keys from §7.2's rules): the whole
		// budget gets its partition, one unit more is a time limit, on every engine.
		{name: "fuel-edge/fill-whole-budget", file: h("fuel-edge"), keys: []string{fuelEdgeKey('m', 2147481680)}, exit: 0, want: []int32{0}},
		{name: "fuel-edge/fill-one-unit-more", file: h("fuel-edge"), keys: []string{fuelEdgeKey('m', 2147481681)}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "fuel-edge"}},
		{name: "fuel-edge/random_get-within", file: h("fuel-edge"), keys: []string{fuelEdgeKey('r', 33554175)}, exit: 0, want: []int32{1}},
		{name: "fuel-edge/random_get-over", file: h("fuel-edge"), keys: []string{fuelEdgeKey('r', 33554176)}, exit: 1, goErr: runtime.ErrTimeLimit, says: []string{"time limit", "fuel-edge"}},
		// The table limit (§7.3): refused before anything is allocated; grown to exactly the limit.
		{name: "table-huge", file: h("table-huge"), exit: 2, goErr: runtime.ErrTableLimit, says: []string{"table limit", "134217728", "131072"}},
		{name: "table-grow", file: h("table-grow"), keys: []string{"", "616263"}, exit: 0, want: []int32{0, 3}},
		// What every host loads (§7.3, §2.6).
		{name: "elem-out-of-bounds", file: h("elem-out-of-bounds"), exit: 2, goErr: runtime.ErrInvalidModule, says: []string{"invalid WebAssembly module", "element segment 0"}},
		{name: "data-out-of-bounds", file: h("data-out-of-bounds"), exit: 2, goErr: runtime.ErrInvalidModule, says: []string{"invalid WebAssembly module", "data segment 0"}},
		{name: "metadata-invalid-utf8", file: h("metadata-invalid-utf8"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata", "UTF-8"}},
		{name: "metadata-bom", file: h("metadata-bom"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata", "byte-order mark"}},
		{name: "metadata-nan", file: h("metadata-nan"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata"}},
		{name: "metadata-deep", file: h("metadata-deep"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata", "2001"}},
		{name: "metadata-key-case", file: h("metadata-key-case"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata", "name"}},
		{name: "metadata-null-property", file: h("metadata-null-property"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata", "properties"}},
		{name: "metadata-description-type", file: h("metadata-description-type"), exit: 2, goErr: runtime.ErrBadMetadata, says: []string{"invalid plugin metadata", "description"}},
		{name: "metadata-big-number", file: h("metadata-big-number"), exit: 0, want: []int32{1, 2}},
		// A limit hit by the start function is that limit (§7), not a trap.
		{name: "start-loop", file: h("start-loop"), exit: 2, goErr: runtime.ErrTimeLimit, says: []string{"time limit"}, slow: true},
		{name: "start-memory", file: h("start-memory"), exit: 2, goErr: runtime.ErrMemoryLimit, says: []string{"memory limit"}},
	}
	for _, m := range mods {
		if m.group == "template" && !strings.Contains(strings.TrimPrefix(m.name, "template/"), "/") {
			cases = append(cases, hostileCase{name: "config/rejected/" + m.name, file: m.name, flags: []string{"seed=x"}, exit: 2, goErr: runtime.ErrConfigRejected, says: []string{"rejected", "config"}})
		}
	}
	for i := range cases {
		c := &cases[i]
		if c.keys == nil {
			c.keys = []string{"00", "0102"}
		}
		if c.n == "" {
			c.n = "10"
		}
		// A module from the agreement table: its file.
		for _, m := range mods {
			if c.file == m.name {
				c.file = m.path
			}
		}
	}
	return cases
}

// fuelEdgeKey is a key of fuel-edge.wat: "fuel", the opcode, t little-endian; in hex.
func fuelEdgeKey(op byte, t uint32) string {
	return hex.EncodeToString(binary.LittleEndian.AppendUint32([]byte{'f', 'u', 'e', 'l', op}, t))
}

// fnv1a32 is the 32-bit FNV-1a of the FNV specification: bulk-trigger.wat's function for every
// key but its trigger.
func fnv1a32(key []byte) uint32 {
	h := uint32(2166136261)
	for _, c := range key {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

func (hc *hostileCase) decodedKeys(t *testing.T) [][]byte {
	keys := make([][]byte, len(hc.keys))
	for i, k := range hc.keys {
		b, err := hex.DecodeString(k)
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = b
	}
	return keys
}

func (hc *hostileCase) checkGo(t *testing.T, e *goEngine) {
	wasm, err := os.ReadFile(hc.file)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(hc.n, 10, 64)
	if n > 1<<31-1 {
		n = 0 // not representable as int32: the CLI's refusal; the runtime's is the same
	}
	var raw []byte
	if hc.configHex != "" {
		raw, _ = hex.DecodeString(hc.configHex)
	}
	if e.raceSkip(wasm) {
		t.Skipf("%s under -race: a Go-built module; the run without -race covers it", e.name)
	}
	got, err := e.fresh(wasm, hc.flags, raw, hc.decodedKeys(t), int32(n))
	hc.checkOutcome(t, e.name, got, err)
}

func (hc *hostileCase) checkOutcome(t *testing.T, who string, got []int32, err error) {
	t.Helper()
	if hc.exit == 0 {
		if err != nil {
			t.Fatalf("%s: %v; want partitions", who, err)
		}
		hc.checkPartitions(t, who, got)
		return
	}
	if !errors.Is(err, hc.goErr) {
		t.Fatalf("%s: got %v; want an error wrapping %q", who, err, hc.goErr)
	}
	msg := strings.ToLower(err.Error())
	for _, s := range hc.says {
		if !strings.Contains(msg, strings.ToLower(s)) {
			t.Errorf("%s: error %q does not say %q", who, err, s)
		}
	}
}

func (hc *hostileCase) checkPartitions(t *testing.T, who string, got []int32) {
	t.Helper()
	if len(got) != len(hc.keys) {
		t.Fatalf("%s: %d partitions for %d keys", who, len(got), len(hc.keys))
	}
	n, _ := strconv.Atoi(hc.n)
	for i, p := range got {
		if p < 0 || int(p) >= n {
			t.Errorf("%s: key %d: partition %d is not in [0, %d)", who, i, p, n)
		}
		if hc.want != nil && p != hc.want[i] {
			t.Errorf("%s: key %d (hex %s): partition %d, want %d", who, i, truncHex(hc.decodedKeys(t)[i]), p, hc.want[i])
		}
	}
}

func (hc *hostileCase) checkHost(t *testing.T, h *confHost) {
	var stdin []byte
	for _, k := range hc.keys {
		stdin = append(append(stdin, k...), '\n')
	}
	args := runArgs(hc.file, hc.n, hc.flags)
	if hc.configHex != "" {
		args = append(args, "--config-hex", hc.configHex)
	}
	r := h.run(t, args, stdin)
	who := "host " + h.name
	if r.exit != hc.exit {
		t.Fatalf("%s: exit %d, want %d (stderr: %s)", who, r.exit, hc.exit, strings.TrimSpace(r.stderr))
	}
	if hc.exit == 0 {
		got, err := parsePartitions(r.stdout)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		hc.checkPartitions(t, who, got)
		return
	}
	msg := strings.ToLower(r.stderr)
	for _, s := range hc.says {
		if !strings.Contains(msg, strings.ToLower(s)) {
			t.Errorf("%s: stderr %q does not say %q", who, strings.TrimSpace(r.stderr), s)
		}
	}
}
