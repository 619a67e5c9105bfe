package main

import (
	"os"
	"path/filepath"

	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

// newLibrary returns a module library on a runtime whose compiled code is cached on disk
// (wazero's compilation cache), so that a large module (a Go plugin takes about a second to
// compile) is compiled once per machine, not once per command. PCTL_CACHE_DIR overrides the
// location; an unusable cache directory falls back to compiling in memory.
func newLibrary(e *env, cfg runtime.Config) (*partitioner.Library, error) {
	if cfg.CacheDir == "" {
		cfg.CacheDir = cacheDir(e)
	}
	rt, err := runtime.New(e.ctx, cfg)
	if err != nil && cfg.CacheDir != "" {
		cfg.CacheDir = ""
		rt, err = runtime.New(e.ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	return partitioner.NewLibrary(rt), nil
}

func cacheDir(e *env) string {
	if d := e.getenv("PCTL_CACHE_DIR"); d != "" {
		return d
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	d := filepath.Join(base, "pctl", "wazero")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return ""
	}
	return d
}
