"""pctl's WebAssembly host of spec/abi-v1.md on wasmtime: the one WASM runtime of the Python SDK.

The conformance vector runner (conformance/hosts/python) and the SDK's producer both run modules
through this package. `Plugin` is one prepared instance (§3); most callers want
`pctl.Partitioner`, which adds locking and replaces an instance after a failure.

No NATS here: this package depends on wasmtime alone."""

from .config import ConfigError, encode_config
from .host import (ABI_VERSION, CLASS, MAX_CONFIG, MAX_KEY, MAX_MODULE_BYTES, MAX_PARTITIONS, CallError, LoadError,
                   Plugin, UsageError, code_name)

__all__ = ["ABI_VERSION", "CLASS", "MAX_CONFIG", "MAX_KEY", "MAX_MODULE_BYTES", "MAX_PARTITIONS", "CallError",
           "ConfigError", "LoadError", "Plugin", "UsageError", "code_name", "encode_config"]
