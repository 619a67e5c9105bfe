#!/bin/sh
# Builds my-partitioner.wasm from src/lib.rs with rustc alone (no cargo, no
# crates): a no_std cdylib for wasm32-unknown-unknown, no imports (the pctl
# portable profile).
#
# Needs rustc with the wasm32-unknown-unknown standard library: with rustup,
# `rustup target add wasm32-unknown-unknown`; on Debian and Ubuntu,
# `apt-get install rustc libstd-rust-dev-wasm32`. Set RUSTC to choose a rustc
# (for example RUSTC=/usr/bin/rustc when rustup's has no wasm32 target).
#
#   -C panic=abort            a panic is a trap; no unwinding machinery
#   -C opt-level=3, codegen-units=1, strip=symbols   small, fast, no names
#   -C link-arg=-zstack-size=65536   64 KiB of stack is plenty
#   --remap-path-prefix       no build path in the output: same bytes anywhere
set -eu
cd "$(dirname "$0")"
RUSTC=${RUSTC:-rustc}
target=wasm32-unknown-unknown
if [ ! -d "$("$RUSTC" --print sysroot)/lib/rustlib/$target" ]; then
	echo "build.sh: $RUSTC has no $target standard library:" >&2
	echo "  rustup target add $target   (or RUSTC=/path/to/a/rustc that has it)" >&2
	exit 1
fi
"$RUSTC" --edition=2021 --crate-type=cdylib --crate-name partitioner \
	--target "$target" -C opt-level=3 -C debuginfo=0 -C strip=symbols \
	-C panic=abort -C codegen-units=1 -C link-arg=-zstack-size=65536 \
	--remap-path-prefix="$PWD"=. -o my-partitioner.wasm src/lib.rs
echo "built $PWD/my-partitioner.wasm"
