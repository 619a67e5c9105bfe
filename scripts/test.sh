#!/usr/bin/env bash
# The whole test suite: what a newcomer runs, and exactly what CI runs (.ci/run calls this).
# It installs what the tests need from the registries first (Debian packages, npm, PyPI,
# Maven Central), so a fresh machine needs nothing installed by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }
t0=$(date +%s)

step "toolchains (scripts/install-toolchains.sh)"
bash scripts/install-toolchains.sh

# Tests that need a toolchain, an engine or an SDK fail instead of skipping when it is missing.
export PCTL_REQUIRE_TOOLCHAINS=1

step "go vet"
go vet ./...

step "go test -race: every Go package (the other languages' hosts and SDKs take part through conformance/ and sdk/crosslang)"
go test -race -timeout 40m ./...

step "go test without the race detector: the million-key WASM/native agreement and all 30 randomised epoch-change seeds"
go test -count=1 -timeout 30m -run 'TestWASMAgreesWithNative|TestMurmur2Builds|TestRandomised' ./partitioner/ ./broker/scenario/

step "unit tests of the conformance hosts and SDKs in other languages (node --test, pytest, Maven Surefire)"
for d in conformance/hosts/*/ sdk/*/; do
	if [ -f "$d/test" ] && [ -x "$d/test" ]; then
		echo "--- $d"
		if [ -x "$d/setup" ]; then "$d/setup"; fi
		"$d/test"
	fi
done

step "done in $(( $(date +%s) - t0 ))s"
