package plugins

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"testing"
)

func TestBuiltinNames(t *testing.T) {
	names := BuiltinNames()
	want := []string{"jump", "kafka-murmur2", "librdkafka-consistent", "librdkafka-fnv1a", "linear-murmur2", "sarama-fnv1a"}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("BuiltinNames() = %v, want %v (spec/builtins.md)", names, want)
	}
	if !sort.StringsAreSorted(names) {
		t.Fatalf("BuiltinNames() not sorted: %v", names)
	}
	names[0] = "changed"
	if BuiltinNames()[0] != "jump" {
		t.Fatal("BuiltinNames returns a slice the caller can change")
	}
	for _, n := range want {
		b, ok := Builtin(n)
		if !ok || !bytes.HasPrefix(b, []byte("\x00asm\x01\x00\x00\x00")) {
			t.Errorf("Builtin(%q) = %d bytes, %v: want a wasm module", n, len(b), ok)
		}
	}
	for _, n := range []string{"", "nope", "kafka-murmur2.wasm", "c/jump"} {
		if _, ok := Builtin(n); ok {
			t.Errorf("Builtin(%q) found a module", n)
		}
	}
}

func TestMurmur2Builds(t *testing.T) {
	builds := Murmur2Builds()
	if len(builds) != 4 {
		t.Fatalf("Murmur2Builds() has %d builds, want c, go, assemblyscript, rust", len(builds))
	}
	c, _ := Builtin("kafka-murmur2")
	if !bytes.Equal(builds["c"], c) {
		t.Error(`Murmur2Builds()["c"] is not the kafka-murmur2 built-in`)
	}
	for _, tc := range []string{"go", "assemblyscript", "rust"} {
		if !bytes.HasPrefix(builds[tc], []byte("\x00asm")) {
			t.Errorf("Murmur2Builds()[%q] is not a wasm module", tc)
		}
	}
}

// The ten functions of the wasi-deterministic profile (spec/abi-v1.md 6.2).
var wasiAllowed = map[string]bool{
	"args_sizes_get": true, "args_get": true, "environ_sizes_get": true, "environ_get": true,
	"clock_time_get": true, "random_get": true, "fd_write": true, "poll_oneoff": true,
	"sched_yield": true, "proc_exit": true,
}

// TestImportProfiles checks the profile of every module from its import
// section: none at all for the built-ins and the AssemblyScript and Rust
// builds (portable), and only listed WASI functions for the Go build.
func TestImportProfiles(t *testing.T) {
	check := func(name string, b []byte, wasiOK bool) {
		imports, err := importNames(b)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		for _, imp := range imports {
			mod, fn, _ := bytes.Cut([]byte(imp), []byte("."))
			if !wasiOK || string(mod) != "wasi_snapshot_preview1" || !wasiAllowed[string(fn)] {
				t.Errorf("%s imports %s: not allowed in its profile", name, imp)
			}
		}
	}
	for _, n := range BuiltinNames() {
		b, _ := Builtin(n)
		check("builtin "+n, b, false)
	}
	for tc, b := range Murmur2Builds() {
		check("kafka-murmur2 "+tc, b, tc == "go")
	}
}

// importNames lists "module.name" of every import of a wasm binary.
func importNames(b []byte) ([]string, error) {
	if !bytes.HasPrefix(b, []byte("\x00asm\x01\x00\x00\x00")) {
		return nil, errors.New("not a wasm 1 binary")
	}
	r := &reader{b: b[8:]}
	var names []string
	for len(r.b) > 0 {
		id := r.byte()
		size := r.u32()
		if r.err != nil || int(size) > len(r.b) {
			return nil, errors.New("truncated section")
		}
		body := &reader{b: r.b[:size]}
		r.b = r.b[size:]
		if id != 2 {
			continue
		}
		for n := body.u32(); n > 0 && body.err == nil; n-- {
			mod, name := body.name(), body.name()
			kind := body.byte()
			switch kind {
			case 0: // func: type index
				body.u32()
			case 1: // table: reftype, limits
				body.byte()
				body.limits()
			case 2: // memory
				body.limits()
			case 3: // global: valtype, mut
				body.byte()
				body.byte()
			default:
				return nil, fmt.Errorf("unknown import kind %d", kind)
			}
			names = append(names, mod+"."+name)
		}
		if body.err != nil {
			return nil, body.err
		}
	}
	return names, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		r.err = errors.New("unexpected end")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) u32() uint32 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > 1<<32-1 {
		r.err = errors.New("bad LEB128")
		r.b = nil
		return 0
	}
	r.b = r.b[n:]
	return uint32(v)
}

func (r *reader) name() string {
	n := r.u32()
	if int(n) > len(r.b) {
		r.err = errors.New("bad name")
		r.b = nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *reader) limits() {
	if r.byte()&1 == 1 {
		r.u32()
	}
	r.u32()
}
