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

# Tests that need a toolchain fail instead of skipping when it is missing.
export PCTL_REQUIRE_TOOLCHAINS=1

step "go vet"
go vet ./...

step "go test -race"
go test -race -timeout 30m ./...

step "done in $(( $(date +%s) - t0 ))s"
