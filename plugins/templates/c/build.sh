#!/bin/sh
# Builds my-partitioner.wasm from partitioner.c: freestanding C for wasm32,
# no libc, no imports (the portable profile of the pctl ABI).
#
# Needs LLVM's clang with the wasm32 target and wasm-ld (lld): on Debian and
# Ubuntu `apt-get install clang lld`, on macOS `brew install llvm lld` (Apple's
# clang has no wasm32 target). Set CLANG to use another clang.
#
#   -ffreestanding -nostdlib  no libc, no start files
#   -fno-builtin              clang must not turn loops into memcpy/memset
#                             calls: they would be imports
#   --no-entry                a library, not a program: the exports are the API
#   --stack-first             the stack below the data: an overflow traps
#                             instead of overwriting the buffer
#   -ffile-prefix-map         no build path in the output: same bytes anywhere
set -eu
cd "$(dirname "$0")"
CLANG=${CLANG:-clang}
"$CLANG" --target=wasm32-unknown-unknown -std=c11 -O2 \
	-ffreestanding -fno-builtin -nostdlib \
	-Wall -Wextra -Werror -ffile-prefix-map="$PWD"=. \
	-Wl,--no-entry -Wl,--strip-all -Wl,--stack-first -Wl,-z,stack-size=65536 \
	-o my-partitioner.wasm partitioner.c
echo "built $PWD/my-partitioner.wasm"
