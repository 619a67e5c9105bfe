#!/usr/bin/env bash
# Rebuilds the hostile test modules beside their sources: every <name>.wat to
# <name>.wasm with wat2wasm (Debian package wabt, installed by
# scripts/install-toolchains.sh), oversize.wasm from oversize.wat with
# oversize/gen.go, and the two files that are not modules at all.
# Deterministic: running it again changes no byte. See README.md for what
# each module does and what a host must answer.
set -euo pipefail
cd "$(dirname "$0")"

command -v wat2wasm >/dev/null || { echo "build.sh: wat2wasm not found: run scripts/install-toolchains.sh" >&2; exit 1; }

for wat in *.wat; do
	name=${wat%.wat}
	[ "$name" = oversize ] && continue
	wat2wasm "$wat" -o "$name.wasm"
done

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
wat2wasm oversize.wat -o "$tmp"
go run oversize/gen.go "$tmp" oversize.wasm

# Not WebAssembly: plain text where a module is expected.
printf 'This is not a WebAssembly module: a pctl host must refuse it at load.\n' > not-wasm.wasm
# The right magic and version, then a section cut off in the middle.
head -c 24 loop-forever.wasm > truncated.wasm
