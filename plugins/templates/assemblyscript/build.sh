#!/bin/sh
# Builds my-partitioner.wasm from assembly/index.ts with the AssemblyScript
# compiler, at the exact version package-lock.json pins (npm ci installs it
# into node_modules the first time). Needs Node.js 20 or later and npm.
#
#   -O3                 optimise for speed
#   --runtime stub      the smallest runtime: a bump allocator that never frees
#                       (this module allocates nothing after start-up)
#   --noAssert --use abort=   no assertions and no abort handler: otherwise
#                       the module would import env.abort, and a pctl module
#                       of the portable profile has no imports at all
set -eu
cd "$(dirname "$0")"
if [ ! -x node_modules/.bin/asc ]; then
	npm ci --prefer-offline --no-audit --no-fund --loglevel=error
fi
node_modules/.bin/asc assembly/index.ts -O3 --noAssert --runtime stub --use abort= \
	-o my-partitioner.wasm
echo "built $PWD/my-partitioner.wasm"
