//go:build ignore

// Command gen writes oversize.wasm: the module built from oversize.wat plus
// one more active data segment of 8 MiB + 1 zero bytes at address 1114112,
// so that the result is a valid module larger than the 8 MiB module-size
// limit of spec/abi-v1.md section 7. Zeros compress well in git.
//
//	go run oversize/gen.go oversize.base.wasm oversize.wasm
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
)

const (
	segmentAddr = 1114112   // 17 pages: above the buffer [65536, 1114112)
	segmentSize = 8<<20 + 1 // one byte more than the limit by itself
	secData     = 11        // data section id
	secDataCnt  = 12        // data count section id
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: go run oversize/gen.go BASE.wasm OUT.wasm")
		os.Exit(2)
	}
	base, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err)
	}
	out, err := addSegment(base)
	if err != nil {
		fail(fmt.Errorf("%s: %v", os.Args[1], err))
	}
	if err := os.WriteFile(os.Args[2], out, 0o644); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen:", err)
	os.Exit(1)
}

func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func sleb32(v int32) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// addSegment appends the zero segment to the module's data section (creating
// one at the end if there is none) and keeps a data count section in step.
func addSegment(mod []byte) ([]byte, error) {
	if !bytes.HasPrefix(mod, []byte("\x00asm\x01\x00\x00\x00")) {
		return nil, fmt.Errorf("not a wasm 1 module")
	}
	seg := []byte{0x00, 0x41} // active, memory 0, offset i32.const ...
	seg = append(seg, sleb32(segmentAddr)...)
	seg = append(seg, 0x0b) // end
	seg = append(seg, uleb(segmentSize)...)
	seg = append(seg, make([]byte, segmentSize)...)

	out := append([]byte(nil), mod[:8]...)
	rest := mod[8:]
	found := false
	for len(rest) > 0 {
		id := rest[0]
		size, n := binary.Uvarint(rest[1:])
		if n <= 0 || uint64(len(rest)-1-n) < size {
			return nil, fmt.Errorf("truncated section %d", id)
		}
		body := rest[1+n : 1+n+int(size)]
		rest = rest[1+n+int(size):]
		switch id {
		case secDataCnt, secData:
			count, m := binary.Uvarint(body)
			if m <= 0 {
				return nil, fmt.Errorf("bad count in section %d", id)
			}
			nb := append(uleb(count+1), body[m:]...)
			if id == secData {
				nb = append(nb, seg...)
				found = true
			}
			body = nb
		}
		out = append(out, id)
		out = append(out, uleb(uint64(len(body)))...)
		out = append(out, body...)
	}
	if !found {
		body := append(uleb(1), seg...)
		out = append(out, secData)
		out = append(out, uleb(uint64(len(body)))...)
		out = append(out, body...)
	}
	return out, nil
}
