package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"pctl.dev/pctl/conformance/clientconf"
)

// 'pctl conformance client' (conformance/clientconf; dispatched from conformance.go).

const conformanceClientHelp = `
Checks a pctl client (any language) against a real broker while it injects faults, and prints
one row per scenario, PASS or FAIL with the reason. The harness starts an embedded broker (a
temporary directory, a random port on 127.0.0.1) for each scenario and drives the client through
two commands (spec/client-conformance.md is the full protocol):

  PRODUCER --server URL --creds FILE --topic T --producer-id ID
      stdin: key<TAB>value lines (a line without a tab: a keyless record). Produce them in order
      with Pctl-Producer ID and Pctl-Seq = the line number, and print one JSON line per record
      when its fate is known: {"pseq": n, "acked": true|false, "partition": p, "epoch": e}
      (partition and epoch optional). Exit when stdin is closed and every record has a result.
  CONSUMER --server URL --creds FILE --topic T --group G --member M --from-beginning --heartbeat 300ms
      Run member M of group G; print each record as 'pctl consume --format jsonl --timestamps'
      does ({"topic","partition","epoch","seq","key"|"key_b64","value","producer","pseq","ts"}),
      acknowledging it only after its line is written. SIGTERM: commit, leave, exit 0.
      A tombstone prints "tombstone": true. (compacted row: also --from current-epoch instead of
      --from-beginning; the producer's --tombstone-marker M makes a line key<TAB>M a tombstone.)

Writing a client for it: a thin wrapper around your producer and consumer that speaks these two
protocols is enough; sdk/node/bin/produce.js and consume.js are about 150 lines each, and
conformance/clientconf/go/ wraps 'pctl produce' and 'pctl consume' in a few lines of shell.

Scenarios (rows), each on a topic of its own with 3 partitions (kafka-murmur2):
  baseline        2 members, no fault; no duplicates allowed
  conn-cuts       every connection cut with a TCP reset 5 times (a loopback proxy)
  ack-timeout     every connection frozen 4 times for 400ms: acknowledgements come late
                  (--ack-args gives the producer a short acknowledgement timeout)
  broker-restart  the broker is killed and restarted on the same port and data
  epochs          grow 3->5, swap the function, shrink 5->2 in the middle of traffic
  member-crash    one of 3 members killed with SIGKILL; duplicates only of its deliveries
  late-member     a second member joins after 2 phases
  compacted       a compacted topic: many updates per key and tombstones through grow 3->5 and a
                  function swap, each with its backfill (the producer gets --tombstone-marker M);
                  tombstones written while a backfill is held must carry the descriptor's hold
                  TTL; then a new group --from current-epoch must get exactly each key's latest
                  value and no deleted key's value
Checks: a result per record; placement of acknowledged and delivered records against their
epoch's module; 'pctl verify' (nothing acknowledged lost, per-key order across members, wrong
keys, unexpected records, duplicates; --compacted in the compacted row); members exit 0 on
SIGTERM and never by themselves.

The commands are split on spaces ("node my/produce.js") and run in their own process group with
PCTL set to this pctl executable. Exit status: 0 every row passed, 1 a row failed, 2 bad usage.

Examples:
  pctl conformance client --producer conformance/clientconf/go/produce --consumer conformance/clientconf/go/consume
  pctl conformance client --producer sdk/python/produce --consumer sdk/python/consume --ack-args '--ack-timeout 0.05'
  pctl conformance client --producer ./produce --consumer ./consume --scenario epochs --seed 7 --json
`

func cmdConformanceClient(e *env, args []string) int {
	const cmd = "conformance client"
	fs := newFlags(e, cmd, "conformance client --producer CMD --consumer CMD [--ack-args ARGS] [--seed N] [--scenario NAME ...] [--keep DIR] [--json] [--verbose]", conformanceClientHelp)
	producer := fs.String("producer", "", "the producer `CMD` of the client under test (split on spaces)")
	consumer := fs.String("consumer", "", "the consumer `CMD` of the client under test (split on spaces)")
	ackArgs := fs.String("ack-args", "", "extra producer `ARGS` in the ack-timeout scenario: a short acknowledgement timeout in the client's syntax")
	seed := fs.Uint64("seed", 1, "seed of the fault moments and the crashed member (>= 1)")
	var only multiFlag
	fs.Var(&only, "scenario", "run only scenario `NAME` (repeatable): "+strings.Join(clientconf.Scenarios(), ", "))
	keep := fs.String("keep", "", "keep every scenario's files (the commands' stdout and stderr, the broker's data) in `DIR`")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("verbose", false, "log scenarios and faults on standard error as they happen")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, cmd, "unexpected argument %q: give the client as --producer CMD --consumer CMD", pos[0])
	}
	if strings.TrimSpace(*producer) == "" || strings.TrimSpace(*consumer) == "" {
		return usageErr(e, cmd, "give both --producer CMD and --consumer CMD (see 'pctl conformance client --help')")
	}
	if *seed == 0 {
		return usageErr(e, cmd, "--seed 0: give a seed of 1 or more")
	}
	opts := clientconf.Options{Producer: strings.Fields(*producer), Consumer: strings.Fields(*consumer), AckArgs: strings.Fields(*ackArgs),
		Seed: *seed, Scenarios: only, Dir: *keep}
	if self, err := os.Executable(); err == nil && e.getenv("PCTL") == "" {
		opts.Env = append(opts.Env, "PCTL="+self)
	}
	if *keep != "" {
		if err := os.MkdirAll(*keep, 0o755); err != nil {
			return usageErr(e, cmd, "--keep: %v", err)
		}
	}
	if *verbose {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(e.stderr, "pctl %s: %s\n", cmd, fmt.Sprintf(format, args...))
		}
	}
	rep, err := clientconf.Run(e.ctx, opts)
	if err != nil {
		if errors.Is(err, clientconf.ErrUsage) {
			return usageErr(e, cmd, "%v", err)
		}
		if e.ctx.Err() != nil {
			return usageFail(e, cmd, "interrupted: no report")
		}
		return failErr(e, cmd, err)
	}
	if *asJSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return failErr(e, cmd, fmt.Errorf("write report: %w", err))
	}
	if !rep.Passed {
		return exitFailure
	}
	return exitOK
}
