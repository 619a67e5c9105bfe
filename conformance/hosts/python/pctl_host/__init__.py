"""pctl ABI v1 vector runner on wasmtime (Python): see conformance/hosts/README.md."""
