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

step "go mod tidy -diff (go.mod and go.sum are what 'go mod tidy' makes)"
go mod tidy -diff

# Suites whose subjects are other processes (a 3-node cluster of pctl nats-server processes with
# pctl serve brokers, SDK members and producers in four languages): the race detector sees only
# the Go test process driving them, so they run once, at full size, in their own step below. The
# client conformance harness (conformance/clientconf) drives the Go client and every SDK the same way.
process_pkgs="./broker/chaos/ ./sdk/crosslang/ ./conformance/clientconf/"

step "go test -race: every Go package but the process suites (the other languages' hosts take part through conformance/)"
go test -race -timeout 40m $(go list ./... | grep -v -x -e pctl.dev/pctl/broker/chaos -e pctl.dev/pctl/sdk/crosslang -e pctl.dev/pctl/conformance/clientconf)

# Tests that shrink under -race (raceEnabled, hostsRace) get their full size here.
# scripts/testsh_test.go finds every such test and fails when one is missing below.
norace_tests='^(TestWASMAgreesWithNative|TestMurmur2Builds|TestLostAcknowledgementsNeverStoreTwice|TestRandomised|TestHundredThousandRecords|TestHosts|TestBuiltinsPass|TestMurmur2BuildsPass|TestHostileModules|TestRuleBreakers|TestConfig|TestReportIsReproducible|TestJSONSchema|TestNotLoadedModuleJSON|TestCancelled|TestCrossLanguage|TestOrderSurvivesCutConnections|TestBackfillKeepsCompactedTopicCorrectAcrossChanges|TestBackfillResumesAfterABrokerDiesAtEachStep|TestClusterBackfillSurvivesLeaderChangesAndABrokerDeath|TestStatefulScaleOut|TestStatefulScaleOutCheckerCatchesLostState|TestStatefulWarmUp|TestStatefulWarmUpCheckerCatchesStaleState)$'
norace_pkgs="./partitioner/ ./broker/ ./broker/scenario/ ./client/ ./conformance/ ./examples/stateful/"
step "go test without the race detector: the tests that shrink under -race, at full size"
go test -count=1 -timeout 30m -run "$norace_tests" $norace_pkgs

step "process suites without the race detector: the cluster fault suite (seeds 1-10: every fault kind first; PCTL_CHAOS_SEEDS=100 for more), the cross-language tests and the client conformance harness on the Go client and every SDK (1 seed; PCTL_CLIENTCONF_SEEDS=N for more)"
go test -count=1 -timeout 30m $process_pkgs

# The conformance hosts' own unit tests ran in TestHosts (conformance/hosts/*/test).
# The three runners run side by side (each starts its own brokers on random ports and builds
# ./cmd/pctl into its own temp dir; one build first fills the cache): one after another they took
# 9 minutes (Java 3, Node 4, Python 2), side by side about as long as the longest. Each one's
# output is printed whole once all have ended.
step "unit tests of the SDKs in other languages, side by side (node --test, pytest, Maven Surefire)"
go build -o /dev/null ./cmd/pctl
sdk_logs=$(mktemp -d)
sdk_names=() sdk_pids=()
for d in sdk/*/; do
	if [ -f "$d/test" ] && [ -x "$d/test" ]; then
		n=$(basename "$d")
		( if [ -x "$d/setup" ]; then "$d/setup"; fi; "$d/test" ) >"$sdk_logs/$n.log" 2>&1 &
		sdk_names+=("$n") sdk_pids+=("$!")
	fi
done
sdk_failed=()
for i in "${!sdk_pids[@]}"; do
	n=${sdk_names[$i]}
	if wait "${sdk_pids[$i]}"; then rc=0; else rc=$?; fi
	printf '\n--- sdk/%s (exit %s)\n' "$n" "$rc"
	cat "$sdk_logs/$n.log"
	if [ "$rc" != 0 ]; then sdk_failed+=("sdk/$n"); fi
done
rm -rf "$sdk_logs"
if [ "${#sdk_failed[@]}" -gt 0 ]; then
	echo "FAILED: the unit tests of ${sdk_failed[*]} (their output is above)" >&2
	exit 1
fi

step "the packages as users get them (sdk/*/package-check: npm pack, python -m build and twine check, mvn install with sources and javadoc; each installed into a fresh project that partitions keys offline)"
for d in sdk/*/; do
	if [ -x "$d/package-check" ]; then
		echo "--- $d"
		"$d/package-check"
	fi
done

step "done in $(( $(date +%s) - t0 ))s"
