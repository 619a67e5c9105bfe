package runtime

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the runtime returns wraps exactly one of them, so callers can
// branch with errors.Is; the wrapping *LoadError or *CallError carries the plugin and the details.
var (
	// ErrNotWasm is returned by Load for bytes that are not a WebAssembly binary.
	ErrNotWasm = errors.New("not a WebAssembly module")
	// ErrModuleTooLarge is returned by Load for a module above Config.MaxModuleBytes.
	ErrModuleTooLarge = errors.New("module too large")
	// ErrInvalidModule is returned by Load for a binary that is malformed or fails validation.
	ErrInvalidModule = errors.New("invalid WebAssembly module")
	// ErrUnsupportedFeature is returned by Load for a module that uses a WebAssembly feature the
	// ABI forbids (threads, exceptions, tail calls, relaxed SIMD, GC, memory64).
	ErrUnsupportedFeature = errors.New("unsupported WebAssembly feature")
	// ErrMissingExport is returned by Load when a required export of spec/abi-v1.md §2 is absent.
	ErrMissingExport = errors.New("missing export")
	// ErrBadSignature is returned by Load when an ABI export has the wrong kind or signature.
	ErrBadSignature = errors.New("export has the wrong signature")
	// ErrForbiddenImport is returned by Load when the module's imports fit no import profile.
	ErrForbiddenImport = errors.New("forbidden import")
	// ErrUnsupportedABI is returned by Load when pctl_abi_version returns a version this host
	// does not implement.
	ErrUnsupportedABI = errors.New("unsupported ABI version")
	// ErrBadMetadata is returned by Load when pctl_metadata returns an invalid document.
	ErrBadMetadata = errors.New("invalid plugin metadata")
	// ErrBadBuffer is returned when pctl_key_buffer returns 0 or a region outside memory.
	ErrBadBuffer = errors.New("plugin did not provide a usable key buffer")

	// ErrConfigRejected is returned when pctl_configure rejects the config (PCTL_E_CONFIG).
	ErrConfigRejected = errors.New("plugin rejected its configuration")
	// ErrConfigUnsupported is returned for a non-empty config given to a module without
	// pctl_configure.
	ErrConfigUnsupported = errors.New("plugin takes no configuration")
	// ErrConfigTooLarge is returned for a config above PCTL_MAX_CONFIG bytes.
	ErrConfigTooLarge = errors.New("configuration too large")

	// ErrKeyTooLong is returned for a key above MaxKeyBytes; the plugin is not called.
	ErrKeyTooLong = errors.New("key too long")
	// ErrInvalidPartitionCount is returned for n outside [1, 2^31-1]; the plugin is not called.
	ErrInvalidPartitionCount = errors.New("invalid partition count")

	// ErrTimeLimit is returned when a call used up its work budget (the guest loops or is far
	// too slow). The instance is replaced.
	ErrTimeLimit = errors.New("time limit exceeded")
	// ErrMemoryLimit is returned when a guest traps after its memory reached the page limit, or
	// when a module declares more initial memory than the limit.
	ErrMemoryLimit = errors.New("memory limit exceeded")
	// ErrTableLimit is returned by Load for a module whose tables could exceed
	// Config.MaxTableElements (spec/abi-v1.md §7.3), before anything is allocated.
	ErrTableLimit = errors.New("table limit exceeded")
	// ErrCallDepth is returned when a guest nests calls deeper than the limit.
	ErrCallDepth = errors.New("call stack exhausted")
	// ErrTrap is returned when a guest traps for another reason (unreachable, out-of-bounds
	// access, division by zero...). The instance is replaced.
	ErrTrap = errors.New("plugin trapped")
	// ErrExit is returned when a wasi-deterministic guest calls proc_exit.
	ErrExit = errors.New("plugin exited")
	// ErrOutOfRange is returned when a plugin returns a partition >= n.
	ErrOutOfRange = errors.New("plugin returned a partition out of range")
	// ErrPluginCode is returned when a plugin returns a negative error code (see Code).
	ErrPluginCode = errors.New("plugin returned an error code")
	// ErrUnsupported is returned by Ancestry when the plugin declares none for the arguments.
	ErrUnsupported = errors.New("not supported by this plugin")

	// ErrClosed is returned by a Pool or Runtime after Close.
	ErrClosed = errors.New("closed")
)

// ABI error codes (spec/abi-v1.md §5).
const (
	CodeInvalid     int32 = -1
	CodeConfig      int32 = -2
	CodeUnsupported int32 = -3
	CodeBuffer      int32 = -4
	CodeInternal    int32 = -5
)

// CodeName returns the spec name of an ABI error code.
func CodeName(code int32) string {
	switch code {
	case CodeInvalid:
		return "PCTL_E_INVALID"
	case CodeConfig:
		return "PCTL_E_CONFIG"
	case CodeUnsupported:
		return "PCTL_E_UNSUPPORTED"
	case CodeBuffer:
		return "PCTL_E_BUFFER"
	case CodeInternal:
		return "PCTL_E_INTERNAL"
	}
	return fmt.Sprintf("unknown error code %d", code)
}

// LoadError reports why a module was refused.
type LoadError struct {
	Digest string // hex SHA-256 of the module bytes ("" if not computed)
	Source string // where the bytes came from, when the caller said (a file name)
	Err    error  // one of the sentinels
	Detail string // what exactly is wrong and what to do
}

func (e *LoadError) Error() string {
	who := "module"
	if e.Source != "" {
		who = e.Source
	}
	if e.Digest != "" {
		who += " (sha256:" + short(e.Digest) + ")"
	}
	if e.Detail == "" {
		return fmt.Sprintf("%s: %v", who, e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", who, e.Err, e.Detail)
}

func (e *LoadError) Unwrap() error { return e.Err }

// CallError reports a failed call into a plugin. The record that needed it gets no partition.
type CallError struct {
	Digest string // hex SHA-256 of the module
	Name   string // the module's declared name
	Op     string // the export called: pctl_partition, pctl_partition_batch, pctl_ancestry, ...
	Err    error  // one of the sentinels
	Code   int32  // the plugin's code, for ErrPluginCode
	Detail string
}

func (e *CallError) Error() string {
	s := fmt.Sprintf("plugin %s (sha256:%s): %s: %v", e.Name, short(e.Digest), e.Op, e.Err)
	if e.Err == ErrPluginCode {
		s += " " + CodeName(e.Code)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Err }

func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
