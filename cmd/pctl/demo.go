package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"pctl.dev/pctl/broker/scenario"
	"pctl.dev/pctl/broker/wire"
)

func init() {
	register(command{name: "demo", summary: "run the whole thing on embedded defaults: grow, shrink and swap a topic's partitioning under traffic, then check order", run: cmdDemo})
}

const demoHelp = `
Starts a broker in a temporary directory and runs, with no setup:

  - a topic partitioned by librdkafka's CRC-32 partitioner (a WebAssembly module);
  - client-side producers (partitioning with the module) and a thin producer that lets the
    broker partition, writing keyed records (and a few keyless ones);
  - a consumer group of 3 members, one of which crashes and is replaced mid-run;
  - epoch changes while traffic flows: grow, shrink, swap the partition function to Kafka's
    murmur2 (the migration Kafka users cannot make without losing order), grow again;
  - a second consumer group that starts after all of it and replays the topic from the start
    (its new-epoch records must wait for their older partitions: the gates really work);

then checks, with an independent checker, every acknowledged record against every delivery:
per-key order, losses, duplicates, and that every record sits in the partition its epoch's
function gives. Exit status 0 only if the checker found nothing wrong.

--faults also restarts the broker in the middle of an epoch change (it must finish the change
after restarting, and producers and consumers must ride it out).

--cluster runs it on a real NATS cluster instead: three JetStream nodes started from this binary
('pctl nats-server', on free 127.0.0.1 ports, data in a temporary directory), topics with 3
replicas and two brokers ('pctl serve --nats'). In the middle of the epoch changes it kills -9
the node leading a partition stream (and starts it again), and kills -9 a broker (and starts it
again); every change must still complete and the checker must still find nothing wrong.

--stateful runs the stateful scale-out instead (examples/stateful): a processor that keeps a
running total per key in a local store and a changelog topic, in a consumer group with the sticky
assignor, goes from 2 to 4 members, its input and changelog topics from 4 to 8 partitions (linear
hashing), then both swap to jump, and a member crashes, while records flow; then every member is
stopped and fresh ones restore from the changelog (the baseline). It checks every key's total
against the input and prints the longest per-key pause of each phase. --keys sets the keys (40
unless given). With --warmup it runs the warm-up proof instead (spec/protocol.md §6.10): over a
changelog that already holds a history, a third member joins without warm-up, leaves, and a
fourth joins after warming up as a standby; it prints both joins' longest per-key pause.
`

func cmdDemo(e *env, args []string) int {
	fs := newFlags(e, "demo", "demo [--records N] [--keys K] [--seed S] [--faults | --cluster | --stateful [--warmup]] [--json] [--verbose] [--data DIR]", demoHelp)
	records := fs.Int("records", 2000, "records per producer")
	keys := fs.Int("keys", 200, "distinct keys")
	seed := fs.Int64("seed", 1, "random seed (the run is otherwise the same)")
	faults := fs.Bool("faults", false, "also restart the broker in the middle of an epoch change")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	verbose := fs.Bool("verbose", false, "log what the broker and the group members do (stderr)")
	data := fs.String("data", "", "keep the broker's data in `DIR` (default: a temporary directory, removed)")
	cluster := fs.Bool("cluster", false, "run on a 3-node NATS cluster of processes with 2 brokers, killing a node and a broker mid-change")
	duration := fs.Duration("duration", 12*time.Second, "with --cluster: how long the producers send (the changes and faults are spread over it)")
	stateful := fs.Bool("stateful", false, "run the stateful scale-out instead (issue 15): running totals with a changelog, 2 -> 4 members, 4 -> 8 partitions, a swap and a crash")
	warmup := fs.Bool("warmup", false, "with --stateful: run the warm-up proof (a join without and a join with warm-up before cut-over)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, "demo", "takes no arguments")
	}
	if *records < 1 || *keys < 1 {
		return usageErr(e, "demo", "--records and --keys must be at least 1")
	}
	if *stateful {
		if *faults || *cluster {
			return usageErr(e, "demo", "--stateful is a run of its own: drop --faults and --cluster")
		}
		k := 40 // unless given: the other demo's default is for more traffic
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "keys" {
				k = *keys
			}
		})
		if *warmup {
			return warmupDemo(e, k, *seed, *asJSON, *verbose, *data)
		}
		return statefulDemo(e, k, *seed, *asJSON, *verbose, *data)
	}
	if *warmup {
		return usageErr(e, "demo", "--warmup goes with --stateful")
	}
	if *cluster {
		if *faults {
			return usageErr(e, "demo", "--faults and --cluster are two different runs; --cluster has its own faults")
		}
		if *duration < 4*time.Second || *duration > 10*time.Minute {
			return usageErr(e, "demo", "--duration %v is out of range (4s to 10m)", *duration)
		}
		return clusterDemo(e, clusterDemoOpts{records: *records, keys: *keys, seed: *seed, json: *asJSON, verbose: *verbose, data: *data, traffic: *duration})
	}
	dir := *data
	if dir == "" {
		d, err := os.MkdirTemp("", "pctl-demo-")
		if err != nil {
			return failErr(e, "demo", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cfg := scenario.Config{
		Seed: *seed, DataDir: dir, Topic: "orders", Partitions: 4, Partitioner: "librdkafka-consistent",
		Keys: *keys, ClientProducers: 2, ThinProducers: 1, StaleProducer: true, Records: *records,
		Members: 3, LateMembers: 2, KillMember: true, SlowMember: time.Millisecond,
		Changes: []scenario.Change{{Partitions: 8}, {Partitions: 3}, {Partitioner: "kafka-murmur2"}, {Partitions: 6}},
		Pace:    3 * time.Second, Timeout: 5 * time.Minute,
	}
	if *faults {
		cfg.RestartDuring = 2
	}
	if *verbose {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(e.stderr, "pctl demo: "+f+"\n", a...) }
	}
	if !*asJSON {
		fmt.Fprintf(e.stdout, "pctl demo: broker in %s; topic orders, %d partitions, %s; %d producers; changes: %s\n",
			dir, cfg.Partitions, cfg.Partitioner, cfg.ClientProducers+cfg.ThinProducers+1, changesText(cfg.Changes))
	}
	res, err := scenario.Run(e.ctx, cfg)
	if err != nil {
		return failErr(e, "demo", err)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(demoJSON(res))
	} else {
		printDemo(e.stdout, res)
	}
	if !res.OK() {
		return exitFailure
	}
	return exitOK
}

func changesText(cs []scenario.Change) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, " -> ")
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func printDemo(w io.Writer, r *scenario.Result) {
	fmt.Fprintf(w, "\nrecords   %d sent, %d acknowledged (%d re-sent under a new epoch after a fence), %d keys\n", r.Sent, r.Acked, r.Resent, r.Keys)
	fmt.Fprintf(w, "epochs\n")
	for i, ep := range r.Epochs {
		line := fmt.Sprintf("  %d  %-22s %2d partitions", ep.Epoch, ep.Partitioner.Name, ep.Partitions)
		if i > 0 && i-1 < len(r.ChangeTimes) {
			line += fmt.Sprintf("   change took %v", r.ChangeTimes[i-1].Round(time.Millisecond))
		}
		if ep.Ancestry != nil {
			line += "   ancestry " + ancestryText(ep.Ancestry, 6)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "faults    member crashed and replaced: %v; broker restarted mid-change: %v\n", r.Killed, r.Restarted)
	fmt.Fprintf(w, "groups\n")
	for _, rep := range r.Reports {
		fmt.Fprintf(w, "  %-8s %d delivered: %d lost, %d order violations, %d wrong keys, %d unexpected, %d duplicates\n", rep.Group, rep.Deliveries, rep.Lost, rep.Violations, rep.WrongKey, rep.Unexpected, rep.Duplicates)
		for _, ex := range rep.Examples {
			fmt.Fprintf(w, "           %s\n", ex)
		}
	}
	fmt.Fprintf(w, "gates     %d records waited for an older partition; longest wait %v, p99 %v\n", r.Gated, r.MaxGateWait.Round(time.Millisecond), percentile(r.GateWaits, 0.99).Round(time.Millisecond))
	fmt.Fprintf(w, "placement %d keyed deliveries checked against their epoch's function: %d outside their partition, %d could not be checked\n", r.Placement.Checked, r.Placement.Wrong, r.Placement.Errors)
	for _, ex := range r.Placement.Examples {
		fmt.Fprintf(w, "           %s\n", ex)
	}
	if r.OK() {
		fmt.Fprintf(w, "\nOK: per-key order held across %d epoch changes (grow, shrink, swap to a new function); nothing acknowledged was lost (%v)\n", len(r.Epochs)-1, r.Elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "\nFAIL: the checker found problems: %s\n", strings.Join(r.Failures(), "; "))
	}
}

// ancestryText summarises an ancestry graph: "observed: 0<-{0,3} 1<-{1} ..." (at most max children).
func ancestryText(a *wire.Ancestry, max int) string {
	var parts []string
	for c, rs := range a.Parents {
		if c == max {
			parts = append(parts, "...")
			break
		}
		var ps []string
		for _, r := range rs {
			if r[1]-r[0] == 1 {
				ps = append(ps, fmt.Sprint(r[0]))
			} else {
				ps = append(ps, fmt.Sprintf("%d-%d", r[0], r[1]-1))
			}
		}
		parts = append(parts, fmt.Sprintf("%d<-{%s}", c, strings.Join(ps, ",")))
	}
	if len(parts) == 0 {
		return a.Source
	}
	return a.Source + ": " + strings.Join(parts, " ")
}

func demoJSON(r *scenario.Result) any {
	return map[string]any{
		"ok": r.OK(), "sent": r.Sent, "acked": r.Acked, "resent": r.Resent, "keys": r.Keys,
		"epochs": r.Epochs, "groups": r.Reports, "gated": r.Gated,
		"max_gate_wait_ms": r.MaxGateWait.Milliseconds(), "p99_gate_wait_ms": percentile(r.GateWaits, 0.99).Milliseconds(),
		"wrong_partition": r.WrongPartition, "placement": r.Placement, "failures": r.Failures(), "sent_logs_reused_seqs": r.Verify.ReusedSeqs, "member_killed": r.Killed, "broker_restarted": r.Restarted,
		"elapsed_ms": r.Elapsed.Milliseconds(),
	}
}
