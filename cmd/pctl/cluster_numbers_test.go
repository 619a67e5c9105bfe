package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/chaos"
	"pctl.dev/pctl/broker/scenario"
	"pctl.dev/pctl/internal/natscluster"
)

// TestClusterNumbers measures, in one run, the README's cluster numbers, each against a baseline
// measured in the same run: produce throughput on an embedded broker vs a 3-node cluster with R1
// and R3 topics (sync_interval always) vs R3 with nats-server's default sync (the cost of
// always); epoch change times on the cluster vs embedded; and the longest delivery stall of a
// live group during each kind of fault vs a run without faults. It takes about 15 minutes on 2
// cores, so it runs only with PCTL_CLUSTER_NUMBERS=1, and prints a table; it asserts nothing
// about speed.
func TestClusterNumbers(t *testing.T) {
	if os.Getenv("PCTL_CLUSTER_NUMBERS") == "" {
		t.Skip("set PCTL_CLUSTER_NUMBERS=1 to measure the README's cluster numbers (about 15 minutes)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	var report strings.Builder

	// Produce throughput.
	bcfg := benchConfig{Records: 20000, Partitions: 8, ValueSize: 100, Keys: 10000, Partitioner: "kafka-murmur2", Rounds: 3}
	type row struct {
		name           string
		client, thin   float64
		raw, rawHeader float64
	}
	var rows []row
	measure := func(name string, url, creds string) {
		cfg := bcfg
		cfg.URL, cfg.Creds = url, creds
		res, err := runProduceBench(ctx, cfg, func(f string, a ...any) { t.Logf(name+": "+f, a...) })
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := row{name: name}
		for _, v := range res {
			switch v.Variant {
			case variantClient:
				r.client = v.Rate
			case variantBroker:
				r.thin = v.Rate
			case variantRaw:
				r.rawHeader = v.Rate
			}
		}
		rows = append(rows, r)
	}
	measure("embedded (1 server)", "", "")
	onCluster := func(name, sync string, replicas int) {
		c := natscluster.Start(t, natscluster.Options{Nodes: 3, SyncInterval: sync})
		b, err := broker.Start(ctx, broker.Config{NATSURL: c.ClientURLs(), Creds: c.Creds(), DataDir: t.TempDir(), Replicas: replicas})
		if err != nil {
			t.Fatal(err)
		}
		measure(name, c.ClientURLs(), c.Creds())
		b.Close()
		c.Close()
	}
	onCluster("3-node cluster, R1, sync always", "always", 1)
	onCluster("3-node cluster, R3, sync always", "always", 3)
	onCluster("3-node cluster, R3, sync every 2m (nats-server default)", "default", 3)
	base := rows[0]
	fmt.Fprintf(&report, "\n| produce (%d records, %d partitions, %d-byte values) | client-side rec/s | vs embedded | broker-side rec/s | vs embedded | raw JetStream rec/s |\n|---|---|---|---|---|---|\n", bcfg.Records, bcfg.Partitions, bcfg.ValueSize)
	for _, r := range rows {
		fmt.Fprintf(&report, "| %s | %.0f | %.2fx | %.0f | %.2fx | %.0f |\n", r.name, r.client, r.client/base.client, r.thin, r.thin/base.thin, r.rawHeader)
	}

	// Epoch change times: the same four changes embedded and on the cluster, no faults.
	changes := []scenario.Change{{Partitions: 8}, {Partitions: 3}, {Partitioner: "kafka-murmur2"}, {Partitions: 6}}
	emb, err := scenario.Run(ctx, scenario.Config{Seed: 1, DataDir: t.TempDir(), Changes: changes, Records: 3000, Pace: 6 * time.Second, Members: 2})
	if err != nil {
		t.Fatal(err)
	}
	plan := chaos.Plan{}
	for i, ch := range changes {
		plan.Changes = append(plan.Changes, chaos.Change{At: time.Duration(i+1) * 2500 * time.Millisecond, Partitions: ch.Partitions, Partitioner: ch.Partitioner})
	}
	quiet, err := chaos.Run(ctx, chaos.Config{Seed: 1, Dir: t.TempDir(), Brokers: 1, Schedule: &plan})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&report, "\n| epoch change | embedded | 3-node cluster, R3 |\n|---|---|---|\n")
	for i, ch := range changes {
		cl := "not done"
		if i < len(quiet.Changes) && quiet.Changes[i].Done {
			cl = quiet.Changes[i].Took.Round(time.Millisecond).String()
		}
		fmt.Fprintf(&report, "| %s | %v | %s |\n", ch, emb.ChangeTimes[i].Round(time.Millisecond), cl)
	}
	if !quiet.OK() {
		t.Errorf("the run without faults failed: %s", strings.Join(quiet.Failures(), "; "))
	}

	// The longest delivery stall during each kind of fault (one run per kind, the fault in the
	// middle of the traffic, with one change during it), against the run without faults.
	fmt.Fprintf(&report, "\n| fault (one run each, 2 brokers, R3) | longest delivery delay (send to live group) | verdict |\n|---|---|---|\n")
	fmt.Fprintf(&report, "| none (baseline, 4 changes) | %v | %s |\n", quiet.WorstStall.Round(time.Millisecond), verdict(quiet))
	for _, k := range chaos.Kinds {
		p := chaos.Plan{Changes: []chaos.Change{{At: 7 * time.Second, Partitions: 6}}}
		f := chaos.Fault{Kind: k, At: 6 * time.Second, For: 4 * time.Second}
		if k == chaos.KillBroker {
			f = chaos.Fault{Kind: k, During: 1, Delay: 100 * time.Millisecond, For: 2 * time.Second}
		}
		p.Faults = []chaos.Fault{f}
		res, err := chaos.Run(ctx, chaos.Config{Seed: 1, Dir: t.TempDir(), Schedule: &p})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		stall := res.WorstStall
		if len(res.Faults) == 1 && res.Faults[0].Err == "" {
			stall = res.Faults[0].Stall
		}
		fmt.Fprintf(&report, "| %s (%s) | %v | %s |\n", k, res.Faults[0].Target, stall.Round(time.Millisecond), verdict(res))
	}
	t.Logf("cluster numbers:\n%s", report.String())
}

func verdict(r *chaos.Result) string {
	if r.OK() {
		return "OK"
	}
	f := r.Failures()
	return fmt.Sprintf("FAIL (%d problems; first: %.120s)", len(f), f[0])
}
