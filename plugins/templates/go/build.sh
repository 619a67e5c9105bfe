#!/bin/sh
# Builds my-partitioner.wasm from main.go with the standard Go toolchain
# (Go 1.24 or later: //go:wasmexport), as a WASI reactor.
#
#   GOOS=wasip1 GOARCH=wasm   WebAssembly with WASI imports (the pctl
#                             wasi-deterministic profile)
#   -buildmode=c-shared       a reactor: exports, _initialize, no main loop
#   -trimpath -buildvcs=false no paths or VCS state in the output
#   -ldflags='-s -w -buildid=' no symbols, no build id: same bytes anywhere
#   GOWORK=off                a go.work above this directory does not apply
set -eu
cd "$(dirname "$0")"
GO=${GO:-go}
GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 GOWORK=off \
	"$GO" build -buildmode=c-shared -trimpath -buildvcs=false \
	-ldflags='-s -w -buildid=' -o my-partitioner.wasm .
echo "built $PWD/my-partitioner.wasm"
