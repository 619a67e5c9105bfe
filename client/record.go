package client

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// Record headers and timestamps (spec/protocol.md §5.3).
const (
	// HeaderTime carries a record's producer time: unix milliseconds, a decimal integer in
	// [0, 2^53).
	HeaderTime = "Pctl-Time"
	// MaxTimeMillis is the largest Pctl-Time (2^53 - 1: every language's integers hold it).
	MaxTimeMillis = 1<<53 - 1
	// MaxHeaderBytes bounds a record's application headers, counted as "<name>: <value>\r\n"
	// lines.
	MaxHeaderBytes = 65536
	// MaxHeaderName is the longest application header name.
	MaxHeaderName = 128
)

// reserved reports whether a header name belongs to the protocol or to JetStream (Pctl-*,
// Nats-*, in any letter case).
func reserved(name string) bool {
	if len(name) < 5 {
		return false
	}
	p := strings.ToLower(name[:5])
	return p == "pctl-" || p == "nats-"
}

// AppHeaders returns a stored record's application headers: every header that is not a protocol
// one, values in their order (spaces around them trimmed, as NATS clients do); nil when there
// are none.
func AppHeaders(h nats.Header) map[string][]string {
	var out map[string][]string
	for name, vs := range h {
		if name == "" || reserved(name) || len(vs) == 0 {
			continue
		}
		if out == nil {
			out = map[string][]string{}
		}
		cp := make([]string, len(vs))
		for i, v := range vs {
			cp[i] = strings.Trim(v, " \t")
		}
		out[name] = cp
	}
	return out
}

// ParseTime parses a Pctl-Time value: a decimal integer without sign or leading zeros in
// [0, 2^53). ok is false for anything else (a consumer then takes the store time).
func ParseTime(v string) (ms int64, ok bool) {
	if v == "" || len(v) > 16 || (len(v) > 1 && v[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > MaxTimeMillis {
		return 0, false
	}
	return n, true
}

// CheckHeaders checks application headers against spec/protocol.md §5.3: names of 1 to 128 of
// A-Z a-z 0-9 _ . -, none starting with Pctl- or Nats-; values UTF-8 without control characters
// or spaces around them; at most MaxHeaderBytes as "<name>: <value>\r\n" lines. The error
// (wire.ErrBadRequest) names the first bad name or value.
func CheckHeaders(h map[string][]string) error {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	sort.Strings(names)
	size := 0
	for _, n := range names {
		if err := checkHeaderName(n); err != nil {
			return err
		}
		for _, v := range h[n] {
			if err := checkHeaderValue(n, v); err != nil {
				return err
			}
			size += len(n) + len(": ") + len(v) + len("\r\n")
		}
	}
	if size > MaxHeaderBytes {
		return fmt.Errorf("%w: application headers of %d bytes; a record carries at most %d bytes of them (spec/protocol.md §5.3)", wire.ErrBadRequest, size, MaxHeaderBytes)
	}
	return nil
}

func checkHeaderName(n string) error {
	ok := len(n) >= 1 && len(n) <= MaxHeaderName
	for i := 0; ok && i < len(n); i++ {
		c := n[i]
		ok = c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: header name %.140q: 1 to %d characters of A-Z a-z 0-9 _ . - (spec/protocol.md §5.3)", wire.ErrBadRequest, n, MaxHeaderName)
	}
	if reserved(n) {
		return fmt.Errorf("%w: header name %q is reserved: names starting with Pctl- or Nats- belong to pctl and JetStream; choose another name", wire.ErrBadRequest, n)
	}
	return nil
}

func checkHeaderValue(n, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%w: header %s: the value is not UTF-8 (encode binary data, e.g. as base64)", wire.ErrBadRequest, n)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: header %s: value %.40q has a control character, which NATS headers cannot carry", wire.ErrBadRequest, n, v)
		}
	}
	if strings.Trim(v, " ") != v {
		return fmt.Errorf("%w: header %s: value %.40q has leading or trailing spaces, which NATS clients trim", wire.ErrBadRequest, n, v)
	}
	return nil
}
