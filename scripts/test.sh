#!/usr/bin/env bash
# The whole test suite: what a newcomer runs, and exactly what CI runs (.ci/run calls this).
# It installs what the tests need from the registries first (Debian packages, npm, PyPI,
# Maven Central), so a fresh machine needs nothing installed by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
step() { printf '\n==> [%ss] %s\n' "$(( $(date +%s) - t0 ))" "$*"; }

step "toolchains (scripts/install-toolchains.sh)"
bash scripts/install-toolchains.sh

# Tests that need a toolchain, an engine or an SDK fail instead of skipping when it is missing.
export PCTL_REQUIRE_TOOLCHAINS=1
# The status page's browser test keeps its screenshots here (internal/statuspage).
export PCTL_SCREENSHOTS="${PCTL_SCREENSHOTS:-$PWD/test-artifacts/screenshots}"

step "go vet"
go vet ./...

step "go test -race: every Go package (the other languages' hosts and SDKs take part through conformance/ and sdk/crosslang)"
go test -race -timeout 40m ./...

# Tests that shrink under -race (raceEnabled, hostsRace) get their full size here.
# scripts/testsh_test.go finds every such test and fails when one is missing below.
norace_tests='^(TestWASMAgreesWithNative|TestMurmur2Builds|TestLostAcknowledgementsNeverStoreTwice|TestRandomised|TestHundredThousandRecords|TestHosts|TestBuiltinsPass|TestMurmur2BuildsPass|TestHostileModules|TestRuleBreakers|TestConfig|TestReportIsReproducible|TestJSONSchema|TestNotLoadedModuleJSON|TestCancelled|TestCrossLanguage)$'
norace_pkgs="./partitioner/ ./broker/ ./broker/scenario/ ./conformance/ ./sdk/crosslang/"
step "go test without the race detector: the tests that shrink under -race, at full size"
go test -count=1 -timeout 30m -run "$norace_tests" $norace_pkgs

# The conformance hosts' own unit tests ran in TestHosts (conformance/hosts/*/test).
step "unit tests of the SDKs in other languages (node --test, pytest, Maven Surefire)"
for d in sdk/*/; do
	if [ -f "$d/test" ] && [ -x "$d/test" ]; then
		echo "--- $d"
		if [ -x "$d/setup" ]; then "$d/setup"; fi
		"$d/test"
	fi
done

step "done in $(( $(date +%s) - t0 ))s"
