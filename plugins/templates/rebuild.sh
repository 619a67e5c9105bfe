#!/bin/sh
# Rebuilds the committed <lang>/my-partitioner.wasm of every template the way
# a user gets it: `pctl plugin new --lang <lang>` into a temporary directory
# with the default name, then that project's ./build.sh. Commit the results.
#
#   plugins/templates/rebuild.sh [LANG ...]     default: all four
#
# Use the pinned toolchains (scripts/install-toolchains.sh; the versions are
# in cmd/pctl/plugin_new_test.go), or the bytes differ from what the test
# expects. RUSTC defaults to Debian's /usr/bin/rustc. The AssemblyScript
# build runs npm ci in the temporary directory (the npm registry).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ $# -gt 0 ] || set -- assemblyscript c go rust
(cd "$root" && go build -o "$tmp/pctl" ./cmd/pctl)
export RUSTC="${RUSTC:-/usr/bin/rustc}" GOTOOLCHAIN=local GOFLAGS=
for lang in "$@"; do
	"$tmp/pctl" plugin new --lang "$lang" --name my-partitioner "$tmp/$lang" >/dev/null
	"$tmp/$lang/build.sh"
	cp "$tmp/$lang/my-partitioner.wasm" "$here/$lang/my-partitioner.wasm"
	echo "$lang: $(wc -c <"$here/$lang/my-partitioner.wasm") bytes"
done
