package runtime

import (
	"fmt"
	"time"
)

// ABI constants of spec/abi-v1.md §1.3.
const (
	ABIVersion       = 1
	MaxKeyBytes      = 65536
	MaxConfigBytes   = 65536
	MinBufferBytes   = 65536
	MaxBufferBytes   = 1 << 20
	MaxMetadataBytes = 65536
	// MaxAncestryRanges is PCTL_MAX_RANGES: the most ranges pctl_ancestry may return.
	MaxAncestryRanges = 8192
	MaxPartitions     = 1<<31 - 1
	// MaxTableElements is PCTL_MAX_TABLE_ELEMENTS (spec/abi-v1.md §7): the default table limit.
	MaxTableElements = 131072
	// WASITime is the value every clock of the wasi-deterministic profile returns (§6.2).
	WASITime uint64 = 1704067200000000000
)

// Engine selects how wazero runs guest code.
type Engine int

const (
	// EngineCompiler compiles guest code to machine code (the default; fastest).
	EngineCompiler Engine = iota
	// EngineInterpreter interprets guest code. Conformance runs every module on both engines.
	EngineInterpreter
)

func (e Engine) String() string {
	if e == EngineInterpreter {
		return "interpreter"
	}
	return "compiler"
}

// Config configures a Runtime. The zero value means every default; each field documents its own.
type Config struct {
	// Engine: EngineCompiler by default.
	Engine Engine

	// MaxModuleBytes is the largest module accepted. Default 8 MiB (spec/abi-v1.md §7).
	MaxModuleBytes int

	// MaxMemoryPages caps every instance's linear memory, initial and grown, in 64 KiB pages.
	// Default 512 (32 MiB).
	MaxMemoryPages uint32

	// MaxTableElements caps the elements of all of an instance's tables together, initial and
	// grown (spec/abi-v1.md §7.3). Default 131072 (PCTL_MAX_TABLE_ELEMENTS).
	MaxTableElements uint64

	// MaxCallDepth is the deepest nesting of guest calls. Default 1000.
	MaxCallDepth uint32

	// Fuel is the work budget of one crossing (a single or a batch call), counted as
	// spec/abi-v1.md §7.2 says: guest instructions (an upper bound), bytes of bulk memory
	// instructions and of WASI calls. Default 1<<31 (PCTL_FUEL), about one second of guest work
	// on current hardware. InitFuel is the budget of the start function and of _initialize,
	// each; default 1<<33 (PCTL_INIT_FUEL).
	Fuel     int64
	InitFuel int64

	// BufferBytes is the size asked of pctl_key_buffer. Default MaxBufferBytes (1 MiB); it bounds
	// the bytes of one batch crossing.
	BufferBytes int

	// MaxBatchKeys bounds the keys of one batch crossing, so that a conforming module's batch
	// always fits its work budget. Default 4096.
	MaxBatchKeys int

	// CacheDir, if set, keeps compiled machine code on disk across processes (wazero's
	// compilation cache). Empty: compile once per process.
	CacheDir string

	// WASITime and WASISeed override the deterministic WASI clock and random stream
	// (spec/abi-v1.md §6.2). Only conformance sets them, to prove a module does not depend on
	// them; zero means the spec's values (WASITime; seed 0).
	WASITime uint64
	WASISeed uint64
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxModuleBytes == 0 {
		c.MaxModuleBytes = 8 << 20
	}
	if c.MaxMemoryPages == 0 {
		c.MaxMemoryPages = 512
	}
	if c.MaxTableElements == 0 {
		c.MaxTableElements = MaxTableElements
	}
	if c.MaxCallDepth == 0 {
		c.MaxCallDepth = 1000
	}
	if c.Fuel == 0 {
		c.Fuel = 1 << 31
	}
	if c.InitFuel == 0 {
		c.InitFuel = 1 << 33
	}
	if c.BufferBytes == 0 {
		c.BufferBytes = MaxBufferBytes
	}
	if c.MaxBatchKeys == 0 {
		c.MaxBatchKeys = 4096
	}
	if c.WASITime == 0 {
		c.WASITime = WASITime
	}
	switch {
	case c.MaxModuleBytes < 0:
		return c, fmt.Errorf("runtime config: MaxModuleBytes %d is negative", c.MaxModuleBytes)
	case c.MaxTableElements > 1<<32-1:
		return c, fmt.Errorf("runtime config: MaxTableElements %d is above 2^32-1", c.MaxTableElements)
	case c.MaxMemoryPages > 65536:
		return c, fmt.Errorf("runtime config: MaxMemoryPages %d is above 65536 (4 GiB)", c.MaxMemoryPages)
	case c.Fuel < 0 || c.InitFuel < 0:
		return c, fmt.Errorf("runtime config: Fuel and InitFuel must be positive")
	case c.BufferBytes < MinBufferBytes || c.BufferBytes > MaxBufferBytes:
		return c, fmt.Errorf("runtime config: BufferBytes %d is outside [%d, %d] (spec/abi-v1.md §2.2)", c.BufferBytes, MinBufferBytes, MaxBufferBytes)
	case c.MaxBatchKeys < 1 || c.MaxBatchKeys > c.BufferBytes/4:
		return c, fmt.Errorf("runtime config: MaxBatchKeys %d is outside [1, %d]", c.MaxBatchKeys, c.BufferBytes/4)
	case c.Engine != EngineCompiler && c.Engine != EngineInterpreter:
		return c, fmt.Errorf("runtime config: unknown engine %d", c.Engine)
	}
	return c, nil
}

// fuelTime is a rough conversion used only in messages.
func fuelTime(f int64) time.Duration {
	return (time.Duration(f/2) * time.Nanosecond).Round(100 * time.Millisecond)
}
