package conformance_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Small modules that break one rule each, so that every check is seen to catch what it is for.
// Each is its WAT source (below) assembled by wat2wasm (wabt 1.0.34); the bytes are kept here as
// hex so that the tests need no tool. TestModulesMatchSource re-assembles them when wat2wasm is
// installed, and prints the new hex if a source changed. (The runtime's hostile modules, in
// runtime/testdata/hostile, are tested too; these cover what they do not.)
type testModule struct {
	name string
	meta string // the pctl_metadata document
	mem  int    // initial memory pages
	body string // functions besides the prelude (memory, metadata data, version, buffer)
	hex  string
}

// wat is the module's full source. The prelude exports memory, pctl_abi_version and
// pctl_key_buffer (65536, whatever the size), and defines $meta, which returns the metadata.
func (m testModule) wat() string {
	return fmt.Sprintf(`(module
  (memory (export "memory") %d)
  (data (i32.const 1024) "%s")
  (func (export "pctl_abi_version") (result i32) (i32.const 1))
  (func (export "pctl_key_buffer") (param $size i32) (result i32) (i32.const 65536))
  (func $meta (result i64) (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const %d)))
%s)
`, m.mem, strings.ReplaceAll(m.meta, `"`, `\"`), len(m.meta), m.body)
}

func (m testModule) wasm(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(m.hex)
	if err != nil || len(b) == 0 {
		t.Fatalf("test module %s: no bytes (run TestModulesMatchSource with wat2wasm installed): %v", m.name, err)
	}
	return b
}

const exportMeta = `  (func (export "pctl_metadata") (result i64) (call $meta))
`

// lenModN is the partition of most test modules: key_len % n. Bad balance, but a valid partitioner.
const lenModN = `  (func (export "pctl_partition") (param $len i32) (param $n i32) (result i32)
    (i32.rem_u (local.get $len) (local.get $n)))
`

var testModules = []testModule{
	{
		// Counts its calls and lets the count into the result: a fresh instance disagrees with a
		// used one. Caught by determinism (fresh-instance).
		name: "stateful", mem: 17, meta: `{"name":"stateful","version":"1.0.0"}`,
		body: exportMeta + `  (global $calls (mut i32) (i32.const 0))
  (func (export "pctl_partition") (param $len i32) (param $n i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (i32.rem_u (i32.add (local.get $len) (global.get $calls)) (local.get $n)))
`,
		hex: "0061736d010000000114046000017f60017f017f6000017e60027f7f017f030605000102020305030100110606017f0141000b075005066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040a3005040041010b0600418080040b0b004280084220864225840b040010020b1100230041016a2400200023006a2001700b0b2c01004180080b257b226e616d65223a22737461746566756c222c2276657273696f6e223a22312e302e30227d",
	},
	{
		// Single calls give key_len % n, batch calls (key_len + 1) % n. Caught by determinism (batch).
		name: "batch-differs", mem: 17, meta: `{"name":"batch-differs","version":"1.0.0"}`,
		body: exportMeta + lenModN + `  (func (export "pctl_partition_batch") (param $count i32) (param $n i32) (result i32)
    (local $i i32) (local $slot i32)
    (loop $next
      (local.set $slot (i32.add (i32.const 65536) (i32.shl (local.get $i) (i32.const 2))))
      (i32.store (local.get $slot) (i32.rem_u (i32.add (i32.load (local.get $slot)) (i32.const 1)) (local.get $n)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $next (i32.lt_u (local.get $i) (local.get $count))))
    (i32.const 0))
`,
		hex: "0061736d010000000114046000017f60017f017f6000017e60027f7f017f0307060001020203030503010011076706066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e0004147063746c5f706172746974696f6e5f626174636800050a5a06040041010b0600418080040b0b00428008422086422a840b040010020b070020002001700b3301027f03404180800420024102746a21032003200328020041016a200170360200200241016a210220022000490d000b41000b0b3101004180080b2a7b226e616d65223a2262617463682d64696666657273222c2276657273696f6e223a22312e302e30227d",
	},
	{
		// Every pctl_metadata call shifts later results. Caught by determinism (interleaved).
		name: "metadata-shifts", mem: 17, meta: `{"name":"metadata-shifts","version":"1.0.0"}`,
		body: `  (global $shift (mut i32) (i32.const 0))
  (func (export "pctl_metadata") (result i64)
    (global.set $shift (i32.add (global.get $shift) (i32.const 1)))
    (call $meta))
  (func (export "pctl_partition") (param $len i32) (param $n i32) (result i32)
    (i32.rem_u (i32.add (local.get $len) (global.get $shift)) (local.get $n)))
`,
		hex: "0061736d010000000114046000017f60017f017f6000017e60027f7f017f030605000102020305030100110606017f0141000b075005066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040a3005040041010b0600418080040b0b00428008422086422c840b0b00230041016a240010020b0a00200023006a2001700b0b3301004180080b2c7b226e616d65223a226d657461646174612d736869667473222c2276657273696f6e223a22312e302e30227d",
	},
	{
		// Claims kafka-murmur2 but is key_len % n. Caught by compatibility.
		name: "false-compat", mem: 17, meta: `{"name":"false-compat","version":"1.0.0","properties":["compatible:kafka-murmur2"]}`,
		body: exportMeta + lenModN,
		hex:  "0061736d010000000114046000017f60017f017f6000017e60027f7f017f03060500010202030503010011075005066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040a2705040041010b0600418080040b0c0042800842208642d300840b040010020b070020002001700b0b5a01004180080b537b226e616d65223a2266616c73652d636f6d706174222c2276657273696f6e223a22312e302e30222c2270726f70657274696573223a5b22636f6d70617469626c653a6b61666b612d6d75726d757232225d7d",
	},
	{
		// Claims compatibility with a built-in that does not exist. Caught by compatibility.
		name: "unknown-compat", mem: 17, meta: `{"name":"unknown-compat","version":"1.0.0","properties":["compatible:no-such-builtin"]}`,
		body: exportMeta + lenModN,
		hex:  "0061736d010000000114046000017f60017f017f6000017e60027f7f017f03060500010202030503010011075005066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040a2705040041010b0600418080040b0c0042800842208642d700840b040010020b070020002001700b0b5e01004180080b577b226e616d65223a22756e6b6e6f776e2d636f6d706174222c2276657273696f6e223a22312e302e30222c2270726f70657274696573223a5b22636f6d70617469626c653a6e6f2d737563682d6275696c74696e225d7d",
	},
	{
		// Declares ancestry but always answers [0, 1): too few parents. Caught by ancestry.
		name: "bad-ancestry", mem: 17, meta: `{"name":"bad-ancestry","version":"1.0.0","properties":["ancestry"]}`,
		body: exportMeta + lenModN + `  (func (export "pctl_ancestry") (param $from i32) (param $to i32) (param $child i32) (result i32)
    (i32.store (i32.const 65536) (i32.const 0))
    (i32.store (i32.const 65540) (i32.const 1))
    (i32.const 1))
`,
		hex: "0061736d01000000011b056000017f60017f017f6000017e60027f7f017f60037f7f7f017f0307060001020203040503010011076006066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040d7063746c5f616e63657374727900050a3e06040041010b0600418080040b0c0042800842208642c300840b040010020b070020002001700b160041808004410036020041848004410136020041010b0b4a01004180080b437b226e616d65223a226261642d616e636573747279222c2276657273696f6e223a22312e302e30222c2270726f70657274696573223a5b22616e636573747279225d7d",
	},
	{
		// Declares ancestry and answers [0, from_n) always: coarse but sound. Passes.
		name: "coarse-ancestry", mem: 17, meta: `{"name":"coarse-ancestry","version":"1.0.0","properties":["ancestry"]}`,
		body: exportMeta + lenModN + `  (func (export "pctl_ancestry") (param $from i32) (param $to i32) (param $child i32) (result i32)
    (i32.store (i32.const 65536) (i32.const 0))
    (i32.store (i32.const 65540) (local.get $from))
    (i32.const 1))
`,
		hex: "0061736d01000000011b056000017f60017f017f6000017e60027f7f017f60037f7f7f017f0307060001020203040503010011076006066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040d7063746c5f616e63657374727900050a3e06040041010b0600418080040b0c0042800842208642c600840b040010020b070020002001700b160041808004410036020041848004200036020041010b0b4d01004180080b467b226e616d65223a22636f617273652d616e636573747279222c2276657273696f6e223a22312e302e30222c2270726f70657274696573223a5b22616e636573747279225d7d",
	},
	{
		// Declares ancestry but declines every query (PCTL_E_UNSUPPORTED). Allowed, but useless:
		// ancestry warns.
		name: "declines-ancestry", mem: 17, meta: `{"name":"declines-ancestry","version":"1.0.0","properties":["ancestry"]}`,
		body: exportMeta + lenModN + `  (func (export "pctl_ancestry") (param $from i32) (param $to i32) (param $child i32) (result i32)
    (i32.const -3))
`,
		hex: "0061736d01000000011b056000017f60017f017f6000017e60027f7f017f60037f7f7f017f0307060001020203040503010011076006066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040d7063746c5f616e63657374727900050a2c06040041010b0600418080040b0c0042800842208642c800840b040010020b070020002001700b0400417d0b0b4f01004180080b487b226e616d65223a226465636c696e65732d616e636573747279222c2276657273696f6e223a22312e302e30222c2270726f70657274696573223a5b22616e636573747279225d7d",
	},
	{
		// 300 initial pages: loads (the limit is 512) but uses more than half. limits warns.
		name: "big-memory", mem: 300, meta: `{"name":"big-memory","version":"1.0.0"}`,
		body: exportMeta + lenModN,
		hex:  "0061736d010000000114046000017f60017f017f6000017e60027f7f017f030605000102020305040100ac02075005066d656d6f72790200107063746c5f6162695f76657273696f6e00000f7063746c5f6b65795f62756666657200010d7063746c5f6d6574616461746100030e7063746c5f706172746974696f6e00040a2605040041010b0600418080040b0b004280084220864227840b040010020b070020002001700b0b2e01004180080b277b226e616d65223a226269672d6d656d6f7279222c2276657273696f6e223a22312e302e30227d",
	},
}

func testModuleNamed(t testing.TB, name string) []byte {
	t.Helper()
	for _, m := range testModules {
		if m.name == name {
			return m.wasm(t)
		}
	}
	t.Fatalf("no test module %q", name)
	return nil
}

// TestModulesMatchSource assembles every test module's WAT with wat2wasm, when it is installed,
// and requires the stored bytes to be exactly the result.
func TestModulesMatchSource(t *testing.T) {
	tool, err := exec.LookPath("wat2wasm")
	if err != nil {
		msg := "wat2wasm not installed (Debian package wabt; scripts/install-toolchains.sh installs it): the stored bytes cannot be checked against their source"
		if os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" {
			t.Fatal(msg + " (PCTL_REQUIRE_TOOLCHAINS=1)")
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	var stale []string
	for _, m := range testModules {
		src := filepath.Join(dir, m.name+".wat")
		out := filepath.Join(dir, m.name+".wasm")
		if err := os.WriteFile(src, []byte(m.wat()), 0o644); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(tool, src, "-o", out).CombinedOutput(); err != nil {
			t.Fatalf("%s: wat2wasm: %v\n%s\n%s", m.name, err, msg, m.wat())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := hex.DecodeString(m.hex); !bytes.Equal(b, want) {
			stale = append(stale, fmt.Sprintf("%s:\n\t\thex: %q,", m.name, hex.EncodeToString(b)))
		}
	}
	if len(stale) > 0 {
		t.Fatalf("stored bytes differ from the sources; paste:\n%s", strings.Join(stale, "\n"))
	}
}
