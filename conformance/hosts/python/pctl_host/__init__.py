"""pctl ABI v1 vector runner on wasmtime (Python): the command line of conformance/hosts/README.md
over the Python SDK's host, pctl.runtime (sdk/python/src/pctl/runtime)."""
