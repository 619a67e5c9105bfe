package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"pctl.dev/pctl/broker/chaos"
)

type clusterDemoOpts struct {
	records, keys int
	seed          int64
	json, verbose bool
	data          string
	traffic       time.Duration
}

// clusterDemoPlan is the demo's schedule: the four changes of 'pctl demo', a node kill in the
// middle of the second (the leader of a partition stream, while the change fences it) and a
// broker kill right after the third was requested.
func clusterDemoPlan(traffic time.Duration) chaos.Plan {
	at := func(f float64) time.Duration { return time.Duration(f * float64(traffic)) }
	return chaos.Plan{
		Changes: []chaos.Change{
			{At: at(0.15), Partitions: 8},
			{At: at(0.35), Partitions: 3},
			{At: at(0.6), Partitioner: "kafka-murmur2"},
			{At: at(0.8), Partitions: 6},
		},
		Faults: []chaos.Fault{
			{Kind: chaos.KillStreamLeader, At: at(0.35) + 200*time.Millisecond, For: 2 * time.Second, Partition: 1},
			{Kind: chaos.KillBroker, During: 3, Delay: 100 * time.Millisecond, For: 2 * time.Second},
		},
	}
}

func clusterDemo(e *env, o clusterDemoOpts) int {
	bin := e.getenv("PCTL_BIN")
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return failErr(e, "demo", fmt.Errorf("--cluster runs this binary as the cluster's nodes, but cannot find it: %v; set PCTL_BIN", err))
		}
		bin = exe
	}
	dir := o.data
	if dir == "" {
		d, err := os.MkdirTemp("", "pctl-demo-cluster-")
		if err != nil {
			return failErr(e, "demo", err)
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return failErr(e, "demo", err)
	}
	traffic := o.traffic
	plan := clusterDemoPlan(traffic)
	rate := max(1, int(float64(o.records)/traffic.Seconds()))
	cfg := chaos.Config{Seed: o.seed, Dir: dir, Bin: bin, Brokers: 2, Traffic: traffic, Rate: rate,
		ClientProducers: 2, ThinProducers: 1, Members: 3, LateMembers: 2, Keys: o.keys, Schedule: &plan}
	if o.verbose {
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(e.stderr, "pctl demo: "+f+"\n", a...) }
	}
	if !o.json {
		var cs []string
		for _, c := range plan.Changes {
			cs = append(cs, c.String())
		}
		fmt.Fprintf(e.stdout, "pctl demo --cluster: 3 NATS nodes and 2 brokers in %s; topic %s, 4 partitions of librdkafka-consistent, 3 replicas; 3 producers; changes: %s; faults: kill -9 a stream leader's node during change 2, kill -9 a broker during change 3\n",
			dir, chaos.Topic, strings.Join(cs, " -> "))
	}
	res, err := chaos.Run(e.ctx, cfg)
	if err != nil {
		if e.ctx.Err() != nil {
			return usageFail(e, "demo", "interrupted")
		}
		return failErr(e, "demo", err)
	}
	if o.json {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{
			"ok": res.OK(), "sent": res.Sent, "acked": res.Acked, "send_failed": res.SendFailed, "epochs": res.Epochs,
			"changes": res.Changes, "faults": res.Faults, "groups": res.Verify.Groups, "placement": res.Placement,
			"misplaced": res.Misplaced, "drain_ms": res.Drain.Milliseconds(), "worst_delivery_delay_ms": res.WorstStall.Milliseconds(),
			"failures": res.Failures(), "elapsed_ms": res.Elapsed.Milliseconds(),
		})
	} else {
		printClusterDemo(e.stdout, res)
	}
	if !res.OK() {
		return exitFailure
	}
	return exitOK
}

func printClusterDemo(w io.Writer, r *chaos.Result) {
	fmt.Fprintf(w, "\nrecords   %d sent, %d acknowledged, %d failed\n", r.Sent, r.Acked, r.SendFailed)
	fmt.Fprintf(w, "epochs\n")
	for i, ep := range r.Epochs {
		line := fmt.Sprintf("  %d  %-22s %2d partitions", ep.Epoch, ep.Partitioner.Name, ep.Partitions)
		if i > 0 && i-1 < len(r.Changes) {
			line += fmt.Sprintf("   change took %v", r.Changes[i-1].Took.Round(time.Millisecond))
		}
		if ep.Ancestry != nil {
			line += "   ancestry " + ancestryText(ep.Ancestry, 6)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "faults\n")
	for _, f := range r.Faults {
		line := fmt.Sprintf("  %-18s %s at %.1fs, back at %.1fs; longest delivery delay of records sent during it %v", f.Kind, f.Target, f.Began.Seconds(), f.Ended.Seconds(), f.Stall.Round(time.Millisecond))
		if f.Err != "" {
			line = fmt.Sprintf("  %-18s not injected: %s", f.Kind, f.Err)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "groups\n")
	if r.Verify != nil {
		for _, rep := range r.Verify.Groups {
			fmt.Fprintf(w, "  %-8s %d delivered: %d lost, %d order violations, %d wrong keys, %d unexpected, %d duplicates\n", rep.Group, rep.Deliveries, rep.Lost, rep.Violations, rep.WrongKey, rep.Unexpected, rep.Duplicates)
			for _, ex := range rep.Examples {
				fmt.Fprintf(w, "           %s\n", ex)
			}
		}
	}
	fmt.Fprintf(w, "delivery  the live group had everything %v after the last fault; longest delivery delay (send to delivery) %v\n", r.Drain.Round(time.Millisecond), r.WorstStall.Round(time.Millisecond))
	fmt.Fprintf(w, "placement %d keyed deliveries checked against their epoch's function: %d outside their partition, %d could not be checked; %d stored records on the wrong side of a boundary\n", r.Placement.Checked, r.Placement.Wrong, r.Placement.Errors, r.Misplaced)
	if r.OK() {
		fmt.Fprintf(w, "\nOK: per-key order held across %d epoch changes (grow, shrink, swap to a new function); nothing acknowledged was lost (%v)\n", len(r.Epochs)-1, r.Elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "\nFAIL: the checker found problems: %s\n", strings.Join(r.Failures(), "; "))
	}
}
