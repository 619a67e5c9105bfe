#!/bin/sh
# Builds my-partitioner.wasm from src/lib.rs with rustc alone (no cargo, no
# crates): a no_std cdylib for wasm32-unknown-unknown, no imports (the pctl
# portable profile).
#
# Needs a rustc with the wasm32-unknown-unknown standard library. Without RUSTC
# it takes the first of `rustc` on PATH and Debian's /usr/bin/rustc that has
# it; when neither has it and rustup is installed, it runs `rustup target add
# wasm32-unknown-unknown` (once; it downloads the target's standard library).
# Otherwise it says what to install. RUSTC=/path/to/rustc chooses one.
#
#   -C panic=abort            a panic is a trap; no unwinding machinery
#   -C opt-level=3, codegen-units=1, strip=symbols   small, fast, no names
#   -C link-arg=-zstack-size=65536   64 KiB of stack is plenty
#   --remap-path-prefix       no build path in the output: same bytes anywhere
set -eu
cd "$(dirname "$0")"
target=wasm32-unknown-unknown
has_target() {
	sysroot=$("$1" --print sysroot 2>/dev/null) && [ -d "$sysroot/lib/rustlib/$target" ]
}
if [ -n "${RUSTC:-}" ]; then
	if ! has_target "$RUSTC"; then
		echo "build.sh: RUSTC=$RUSTC has no $target standard library; unset RUSTC to let build.sh find or add one" >&2
		exit 1
	fi
else
	for c in rustc /usr/bin/rustc; do
		if command -v "$c" >/dev/null 2>&1 && has_target "$c"; then
			RUSTC=$c
			break
		fi
	done
	if [ -z "${RUSTC:-}" ] && command -v rustup >/dev/null 2>&1; then
		echo "build.sh: rustc has no $target standard library; running: rustup target add $target" >&2
		if rustup target add "$target" >&2 && has_target rustc; then
			RUSTC=rustc
		fi
	fi
	if [ -z "${RUSTC:-}" ]; then
		echo "build.sh: no rustc with the $target standard library; install one, then run ./build.sh again:" >&2
		echo "  rustup target add $target                      (with rustup; https://rustup.rs installs rustup)" >&2
		echo "  apt-get install rustc libstd-rust-dev-wasm32   (Debian and Ubuntu)" >&2
		exit 1
	fi
fi
"$RUSTC" --edition=2021 --crate-type=cdylib --crate-name partitioner \
	--target "$target" -C opt-level=3 -C debuginfo=0 -C strip=symbols \
	-C panic=abort -C codegen-units=1 -C link-arg=-zstack-size=65536 \
	--remap-path-prefix="$PWD"=. -o my-partitioner.wasm src/lib.rs
echo "built $PWD/my-partitioner.wasm"
