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
# The README runner (docs/) is one too: its subjects are the shell blocks of the READMEs.
process_pkgs="./broker/chaos/ ./sdk/crosslang/ ./conformance/clientconf/ ./docs/"

step "go test -race: every Go package but the process suites (the other languages' hosts take part through conformance/)"
go test -race -timeout 40m $(go list ./... | grep -v -x -e pctl.dev/pctl/broker/chaos -e pctl.dev/pctl/sdk/crosslang -e pctl.dev/pctl/conformance/clientconf -e pctl.dev/pctl/docs)

# Tests that shrink under -race (raceEnabled, hostsRace) get their full size here.
# scripts/testsh_test.go finds every such test and fails when one is missing below.
norace_tests='^(TestWASMAgreesWithNative|TestMurmur2Builds|TestLostAcknowledgementsNeverStoreTwice|TestRandomised|TestHundredThousandRecords|TestHosts|TestBuiltinsPass|TestMurmur2BuildsPass|TestHostileModules|TestRuleBreakers|TestConfig|TestReportIsReproducible|TestJSONSchema|TestNotLoadedModuleJSON|TestCancelled|TestCrossLanguage|TestOrderSurvivesCutConnections|TestBackfillKeepsCompactedTopicCorrectAcrossChanges|TestBackfillResumesAfterABrokerDiesAtEachStep|TestClusterBackfillSurvivesLeaderChangesAndABrokerDeath|TestStatefulScaleOut|TestStatefulScaleOutCheckerCatchesLostState|TestStatefulWarmUp|TestStatefulWarmUpCheckerCatchesStaleState)$'
norace_pkgs="./partitioner/ ./broker/ ./broker/scenario/ ./client/ ./conformance/ ./examples/stateful/"
step "go test without the race detector: the tests that shrink under -race, at full size"
# Three packages at a time: conformance (TestHosts, about 260 s, mostly other languages' hosts
# starting and answering) held one of two slots while scenario and the rest queued on the other
# (the step took 353 s).
go test -count=1 -timeout 30m -p 3 -run "$norace_tests" $norace_pkgs

step "process suites without the race detector: the cluster fault suite (seeds 1-10: every fault kind first; PCTL_CHAOS_SEEDS=100 for more), the cross-language tests and the client conformance harness on the Go client and every SDK (1 seed; PCTL_CLIENTCONF_SEEDS=N for more), the README runner"
# Three at a time: they mostly wait (on faults, on other processes); two at a time left
# clientconf queued behind crosslang for 3 minutes (the step took 414 s for 259 s of its longest).
go test -count=1 -timeout 30m -p 3 $process_pkgs

# The conformance hosts' own unit tests ran in TestHosts (conformance/hosts/*/test).
# side_by_side SCRIPT... gives every SDK a lane of its own, all lanes at the same time: each lane
# runs sdk/<lang>/SCRIPT for every SCRIPT it has (executable), in the order given, and stops at the
# first that fails. Once all lanes have ended it prints each lane's output whole and fails naming
# every SDK and script that failed. Each SDK's runner starts its own brokers on random ports and
# builds ./cmd/pctl into its own temp dir, so the lanes do not meet. One after another the unit
# tests took 9 minutes (Java 3, Node 4, Python 2); side by side about as long as the longest, and
# each SDK's package check (about 40 s for the three) runs in its lane after its tests.
side_by_side() {
	local logs d n i rc script
	logs=$(mktemp -d)
	local names=() pids=() failed=()
	for d in sdk/*/; do
		n=$(basename "$d")
		local has=0
		for script in "$@"; do
			if [ -f "$d/$script" ] && [ -x "$d/$script" ]; then has=1; fi
		done
		[ "$has" = 1 ] || continue
		(
			for script in "$@"; do
				if [ -f "$d/$script" ] && [ -x "$d/$script" ]; then
					printf -- '--- sdk/%s/%s\n' "$n" "$script"
					if ! "$d/$script"; then
						echo "$script" >"$logs/$n.failed"
						exit 1
					fi
				fi
			done
		) >"$logs/$n.log" 2>&1 &
		names+=("$n") pids+=("$!")
	done
	for i in "${!pids[@]}"; do
		n=${names[$i]}
		if wait "${pids[$i]}"; then rc=0; else rc=$?; fi
		printf '\n=== sdk/%s (exit %s)\n' "$n" "$rc"
		cat "$logs/$n.log"
		if [ "$rc" != 0 ]; then failed+=("sdk/$n/$(cat "$logs/$n.failed" 2>/dev/null || echo '?')"); fi
	done
	rm -rf "$logs"
	if [ "${#failed[@]}" -gt 0 ]; then
		echo "FAILED: ${failed[*]} (the output is above)" >&2
		return 1
	fi
}

step "the SDKs in other languages, side by side, one lane each: their unit tests (node --test, pytest, Maven Surefire), then the packages as users get them (sdk/*/package-check: npm pack, python -m build and twine check, mvn install with sources and javadoc; each installed into a fresh project that partitions keys offline)"
go build -o /dev/null ./cmd/pctl # one build first fills the cache the runners' builds share
side_by_side setup test package-check

step "done in $(( $(date +%s) - t0 ))s"
