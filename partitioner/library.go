package partitioner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"sync"

	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// Library resolves partitioner references to module bytes and loads them into a runtime. A
// reference is, in this order of precedence:
//
//   - a built-in name ("kafka-murmur2"): its embedded module;
//   - a digest, "sha256:<64 hex>" or just the 64 hex digits (a unique prefix of at least 8
//     digits also works): a built-in's module or one given to Add;
//   - otherwise a path to a .wasm file.
//
// It is safe for concurrent use.
type Library struct {
	rt *runtime.Runtime

	mu    sync.Mutex
	added map[string][]byte // digest -> bytes
}

// NewLibrary returns a library that loads modules into rt.
func NewLibrary(rt *runtime.Runtime) *Library {
	return &Library{rt: rt, added: make(map[string][]byte)}
}

// Runtime returns the library's runtime.
func (l *Library) Runtime() *runtime.Runtime { return l.rt }

// Add makes a module resolvable by its digest and returns the digest.
func (l *Library) Add(wasm []byte) string {
	d := runtime.Digest(wasm)
	l.mu.Lock()
	l.added[d] = append([]byte(nil), wasm...)
	l.mu.Unlock()
	return d
}

var hexRE = regexp.MustCompile(`^[0-9a-f]{8,64}$`)

// Resolve returns the module bytes a reference names, and a description of where they came from
// ("built-in kafka-murmur2", "file x.wasm", "sha256:...").
func (l *Library) Resolve(ref string) ([]byte, string, error) {
	if ref == "" {
		return nil, "", fmt.Errorf("%w: empty reference; give a built-in name (%s), sha256:DIGEST or a path to a .wasm file", ErrUnknownPartitioner, strings.Join(plugins.BuiltinNames(), ", "))
	}
	if b, ok := plugins.Builtin(ref); ok {
		return b, "built-in " + ref, nil
	}
	if d := strings.ToLower(strings.TrimPrefix(ref, "sha256:")); hexRE.MatchString(d) {
		var found []byte
		var matches []string
		try := func(digest string, b []byte) {
			if strings.HasPrefix(digest, d) && (len(matches) == 0 || matches[len(matches)-1] != digest) {
				found = b
				matches = append(matches, digest)
			}
		}
		for _, name := range plugins.BuiltinNames() {
			b, _ := plugins.Builtin(name)
			try(runtime.Digest(b), b)
		}
		l.mu.Lock()
		for digest, b := range l.added {
			try(digest, b)
		}
		l.mu.Unlock()
		switch {
		case len(matches) == 1:
			return found, "sha256:" + matches[0], nil
		case len(matches) > 1:
			return nil, "", fmt.Errorf("%w: digest prefix %q is ambiguous (%d modules); give more digits", ErrUnknownPartitioner, d, len(matches))
		}
		if strings.HasPrefix(ref, "sha256:") || len(d) == 64 {
			return nil, "", fmt.Errorf("%w: no module with digest sha256:%s is known here; upload it or give the .wasm file", ErrUnknownPartitioner, d)
		}
	}
	b, err := os.ReadFile(ref)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("%w %q: not a built-in (%s), not a known digest, and no such file", ErrUnknownPartitioner, ref, strings.Join(plugins.BuiltinNames(), ", "))
		}
		return nil, "", fmt.Errorf("%w: %v; check the path and its permissions", ErrUnreadable, err)
	}
	return b, "file " + ref, nil
}

// Load resolves a reference and loads its module (compiled once per digest).
func (l *Library) Load(ctx context.Context, ref string) (*runtime.Module, error) {
	b, src, err := l.Resolve(ref)
	if err != nil {
		return nil, err
	}
	m, err := l.rt.Load(ctx, b)
	var le *runtime.LoadError
	if errors.As(err, &le) {
		le.Source = src
	}
	return m, err
}

// Open resolves, loads and instantiates a partitioner with the given config bytes.
func (l *Library) Open(ctx context.Context, ref string, config []byte, opts runtime.PoolOptions) (*WASM, error) {
	m, err := l.Load(ctx, ref)
	if err != nil {
		return nil, err
	}
	return NewWASM(ctx, m, config, opts)
}
