package wasmbin

import (
	"fmt"
	"unicode/utf8"
)

// reader decodes the primitive encodings of the binary format. The first error sticks; callers
// check r.err once after a group of reads.
type reader struct {
	b     []byte
	pos   int
	err   error
	where string
}

func (r *reader) fail(what string) error {
	if e, ok := r.err.(*Error); ok {
		if e.Where == "" {
			e.Where = r.where
		}
		return e
	}
	msg := "unexpected end of data"
	if what != "" {
		msg += " in " + what
	}
	return &Error{Offset: r.pos, Where: r.where, Msg: msg, Err: ErrMalformed}
}

func (r *reader) setErr(msg string) {
	if r.err == nil {
		r.err = &Error{Offset: r.pos, Where: r.where, Msg: msg, Err: ErrMalformed}
	}
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.setErr("unexpected end of data")
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || r.pos+n > len(r.b) {
		r.setErr(fmt.Sprintf("need %d bytes, %d remain", n, len(r.b)-r.pos))
		return nil
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits uint) uint64 {
	var v uint64
	var shift uint
	for {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			break
		}
		if shift >= bits+7 {
			r.setErr("LEB128 integer too long")
			return 0
		}
	}
	if bits < 64 && v>>bits != 0 {
		r.setErr("LEB128 integer out of range")
		return 0
	}
	return v
}

// sleb reads a signed LEB128 of at most bits bits.
func (r *reader) sleb(bits uint) int64 {
	var v int64
	var shift uint
	var c byte
	for {
		c = r.byte()
		if r.err != nil {
			return 0
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			break
		}
		if shift >= bits+7 {
			r.setErr("LEB128 integer too long")
			return 0
		}
	}
	if shift < 64 && c&0x40 != 0 {
		v |= -1 << shift
	}
	return v
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

func (r *reader) name() string {
	n := r.u32()
	b := r.bytes(int(n))
	if r.err == nil && !utf8.Valid(b) {
		r.setErr("name is not valid UTF-8")
	}
	return string(b)
}

func (r *reader) valTypes() []ValType {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if int(n) > len(r.b)-r.pos {
		r.setErr("vector longer than the section")
		return nil
	}
	out := make([]ValType, n)
	for i := range out {
		out[i] = ValType(r.byte())
	}
	return out
}

func (r *reader) limits() Memory {
	flags := r.byte()
	var m Memory
	m.Shared = flags&0x02 != 0
	m.Is64 = flags&0x04 != 0
	if flags&^0x07 != 0 {
		r.setErr(fmt.Sprintf("unknown limits flags 0x%02x", flags))
		return m
	}
	bits := uint(32)
	if m.Is64 {
		bits = 64
	}
	m.Min = r.uleb(bits)
	if flags&0x01 != 0 {
		m.HasMax = true
		m.Max = r.uleb(bits)
	}
	return m
}

// Encoding helpers.

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	b = appendU32(b, uint32(len(s)))
	return append(b, s...)
}

func appendU64(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}
