#!/usr/bin/env bash
# Installs what building the plugins and hostile test modules needs (and Debian's
# chromium, for the status page's headless-browser test), from the
# package registries only: Debian packages (clang, lld, wabt, Debian's rustc
# with its wasm32 standard library) and the pinned AssemblyScript compiler
# (npm ci in plugins/murmur2/assemblyscript). Go and Node.js are expected on
# the machine already.
#
# Idempotent: whatever is already present is skipped, so a second run takes
# well under a second. Needs root (or sudo) only when it has to apt-get.
# The versions the committed .wasm were built with are pinned in
# plugins/reproducible_test.go.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'install-toolchains: %s\n' "$*"; }

# Debian packages, each with a file that proves it is installed.
need=()
have() { [ -e "$1" ] || command -v "$1" >/dev/null 2>&1; }
have clang || need+=(clang)
have wasm-ld || need+=(lld)
have wat2wasm || need+=(wabt)
have /usr/bin/rustc || need+=(rustc)
have /usr/lib/rustlib/wasm32-unknown-unknown || need+=(libstd-rust-dev-wasm32)
have make || need+=(make)
have /usr/bin/chromium || need+=(chromium) # the status page's browser test (internal/statuspage)
have /usr/share/fonts/truetype/liberation || need+=(fonts-liberation) # text in its screenshots (--no-install-recommends skips fonts)

if [ "${#need[@]}" -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || { log "need root to install: ${need[*]}"; exit 1; }
		sudo="sudo"
	fi
	log "apt-get install ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
	log "Debian packages present (clang, lld, wabt, rustc, libstd-rust-dev-wasm32, chromium, fonts-liberation)"
fi

# AssemblyScript, exactly as package-lock.json pins it. npm ci only when the
# installed tree does not match the lock file (npm writes its own copy of the
# lock into node_modules/.package-lock.json on install).
as_dir=plugins/murmur2/assemblyscript
if ! command -v npm >/dev/null 2>&1; then
	log "npm not found: install Node.js 20 or later to build the AssemblyScript plugin"
	exit 1
fi
if [ -x "$as_dir/node_modules/.bin/asc" ] &&
	cmp -s <(sed -n '/"node_modules\//,$p' "$as_dir/package-lock.json") \
	       <(sed -n '/"node_modules\//,$p' "$as_dir/node_modules/.package-lock.json" 2>/dev/null); then
	log "AssemblyScript present ($as_dir/node_modules)"
else
	log "npm ci in $as_dir"
	(cd "$as_dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
