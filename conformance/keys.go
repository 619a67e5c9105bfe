package conformance

import (
	"encoding/hex"
	"fmt"
	"runtime/debug"
	"unicode/utf8"

	"pctl.dev/pctl/runtime"
)

// keySet is every key the checks use: the fixed keys first, then the seeded random ones. All keys
// are distinct, so that counts over them (balance) are counts over different keys.
type keySet struct {
	all    [][]byte
	fixed  int // all[:fixed] are the fixed keys
	maxLen int
}

func (k keySet) random() [][]byte { return k.all[k.fixed:] }

// splitMix64 is the generator of the random keys (and of the WASI random stream, spec/abi-v1.md
// §6.2): tiny, fast, and the same in every language, so other hosts can reproduce a key set.
type splitMix64 struct{ state uint64 }

func (r *splitMix64) next() uint64 {
	r.state += 0x9E3779B97F4A7C15
	z := r.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (r *splitMix64) intn(n int) int { return int(r.next() % uint64(n)) }

func (r *splitMix64) fill(b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := r.next()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// fixedSeed seeds the content of the fixed long keys, which do not depend on Options.Seed.
const fixedSeed = 0x7063746c // "pctl"

// makeKeys returns the fixed keys and n distinct random keys from seed: half random bytes (mostly
// 0 to 32 bytes, a quarter up to 512), half random UTF-8 (ASCII, Latin, Greek and Cyrillic, CJK,
// emoji; 0 to 24 characters).
func makeKeys(n int, seed uint64) keySet {
	var ks keySet
	seen := make(map[string]bool, n+300)
	add := func(k []byte) bool {
		if seen[string(k)] {
			return false
		}
		seen[string(k)] = true
		ks.all = append(ks.all, k)
		ks.maxLen = max(ks.maxLen, len(k))
		return true
	}

	// Fixed: the empty key, every single byte, all 256 byte values as one key, long keys up to
	// PCTL_MAX_KEY (every block/tail shape of the usual hashes is among the random ones).
	add([]byte{})
	for b := 0; b < 256; b++ {
		add([]byte{byte(b)})
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	add(all)
	fr := splitMix64{fixedSeed}
	for _, size := range []int{257, 1000, 4096, 65535, runtime.MaxKeyBytes} {
		k := make([]byte, size)
		fr.fill(k)
		add(k)
	}
	zeros := make([]byte, runtime.MaxKeyBytes)
	add(zeros)
	ones := make([]byte, runtime.MaxKeyBytes)
	for i := range ones {
		ones[i] = 0xff
	}
	add(ones)
	ks.fixed = len(ks.all)

	r := splitMix64{seed}
	for made := 0; made < n; {
		var k []byte
		if made%2 == 0 {
			size := r.intn(33)
			if r.intn(4) == 0 {
				size = 33 + r.intn(480)
			}
			k = make([]byte, size)
			r.fill(k)
		} else {
			k = randomUTF8(&r, r.intn(25))
		}
		if add(k) {
			made++
		}
	}
	return ks
}

func randomUTF8(r *splitMix64, runes int) []byte {
	b := make([]byte, 0, runes*3)
	for i := 0; i < runes; i++ {
		var c rune
		switch p := r.intn(100); {
		case p < 50:
			c = rune(0x20 + r.intn(0x5f)) // printable ASCII
		case p < 65:
			c = rune(0xa0 + r.intn(0x250-0xa0)) // Latin-1 supplement, Latin extended
		case p < 75:
			c = rune(0x370 + r.intn(0x500-0x370)) // Greek, Cyrillic
		case p < 90:
			c = rune(0x4e00 + r.intn(0x9fff-0x4e00)) // CJK
		default:
			c = rune(0x1f300 + r.intn(0x1fb00-0x1f300)) // emoji and symbols
		}
		if !utf8.ValidRune(c) {
			c = '?'
		}
		b = utf8.AppendRune(b, c)
	}
	return b
}

// keyDesc names a key in a one-line reason: its hex, truncated, and its length.
func keyDesc(k []byte) string {
	switch {
	case len(k) == 0:
		return `"" (the empty key)`
	case len(k) == 1:
		return fmt.Sprintf("0x%x (1 byte)", k)
	case len(k) <= 16:
		return fmt.Sprintf("0x%x (%d bytes)", k, len(k))
	}
	return fmt.Sprintf("0x%x... (%d bytes)", k[:16], len(k))
}

// maxHexBytes bounds the key bytes a report carries (keys reach 64 KiB).
const maxHexBytes = 64

// KeyRef identifies a key in Details: its bytes in hex (the first 64 when longer) and length.
type KeyRef struct {
	Hex       string `json:"key_hex"`
	Len       int    `json:"key_len"`
	Truncated bool   `json:"key_truncated,omitempty"`
}

func keyRef(k []byte) KeyRef {
	if len(k) > maxHexBytes {
		return KeyRef{Hex: hex.EncodeToString(k[:maxHexBytes]), Len: len(k), Truncated: true}
	}
	return KeyRef{Hex: hex.EncodeToString(k), Len: len(k)}
}

// engineName is "wazero <version>" as built into this binary.
func engineName() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				return "wazero " + d.Version
			}
		}
	}
	return "wazero"
}
