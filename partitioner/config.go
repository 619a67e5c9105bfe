package partitioner

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

var configKeyRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// EncodeConfig turns K=V pairs (as given to --config) into the canonical config bytes of
// spec/abi-v1.md §2.5: lines "K=V\n" sorted by K, each K once. No pairs give the empty config.
// The same pairs in any order give the same bytes, so the same flags always give the same
// topic layout.
func EncodeConfig(pairs []string) ([]byte, error) {
	seen := make(map[string]string, len(pairs))
	keys := make([]string, 0, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %q has no '='; write KEY=VALUE", ErrBadConfig, p)
		case !configKeyRE.MatchString(k):
			return nil, fmt.Errorf("%w: key %q must match [A-Za-z0-9_.-]+", ErrBadConfig, k)
		case strings.ContainsRune(v, '\n') || !utf8.ValidString(v):
			return nil, fmt.Errorf("%w: value of %q must be UTF-8 without newlines", ErrBadConfig, k)
		}
		if prev, dup := seen[k]; dup {
			return nil, fmt.Errorf("%w: key %q given twice (%q and %q)", ErrBadConfig, k, prev, v)
		}
		seen[k] = v
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(seen[k])
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

// DecodeConfig is the inverse of EncodeConfig, for display. It returns the pairs in canonical
// order and fails on bytes that are not in canonical form.
func DecodeConfig(b []byte) ([]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[len(b)-1] != '\n' {
		return nil, fmt.Errorf("%w: config does not end with a newline", ErrBadConfig)
	}
	lines := strings.Split(string(b[:len(b)-1]), "\n")
	canon, err := EncodeConfig(lines)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(canon, b) {
		return nil, fmt.Errorf("%w: config is not in canonical form (sorted K=V lines)", ErrBadConfig)
	}
	return lines, nil
}
