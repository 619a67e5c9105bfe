package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/examples/stateful"
)

// statefulDemo runs examples/stateful's scale-out on an embedded broker and prints its report.
func statefulDemo(e *env, keys int, seed int64, asJSON, verbose bool, data string) int {
	dir := data
	if dir == "" {
		d, err := os.MkdirTemp("", "pctl-demo-")
		if err != nil {
			return failErr(e, "demo", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	b, err := broker.Start(e.ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		return failErr(e, "demo", err)
	}
	defer b.Close()
	cfg := stateful.ScaleOutConfig{Keys: keys, Seed: seed}
	if !asJSON {
		fmt.Fprintf(e.stdout, "pctl demo --stateful: broker in %s; running totals of %d keys, changelog topic cl; group totals (sticky assignor)\n", dir, keys)
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(e.stdout, "  "+f+"\n", a...) }
	}
	if verbose {
		cfg.MemberLogf = func(f string, a ...any) { fmt.Fprintf(e.stderr, "pctl demo: "+f+"\n", a...) }
	}
	rep, err := stateful.RunScaleOut(e.ctx, b, cfg)
	if err != nil {
		return failErr(e, "demo", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		fmt.Fprintf(e.stdout, "\nrecords   %d, all acknowledged; %d keys\n", rep.Records, rep.Keys)
		fmt.Fprintf(e.stdout, "members   applied %d, skipped %d redelivered after the crash, %d state loads, %d flushes\n",
			rep.Stats.Applied, rep.Stats.Duplicates, rep.Stats.Loads, rep.Stats.Flushes)
		fmt.Fprintf(e.stdout, "pauses    the longest gap between two records of one key, per phase:\n")
		for _, p := range rep.Phases {
			fmt.Fprintf(e.stdout, "            %-34s %v (key %s)\n", p.Name, p.Longest.Round(time.Millisecond), p.Key)
		}
		fmt.Fprintf(e.stdout, "          scale-out (members, expansions, swap) %v vs stop-and-restore %v: ratio %.2f\n",
			rep.ScaleOut.Round(time.Millisecond), rep.Baseline.Round(time.Millisecond), rep.Ratio)
		for _, m := range rep.MemberErrors {
			fmt.Fprintf(e.stdout, "member    stopped with an error: %s\n", m)
		}
		if rep.Wrong == 0 {
			fmt.Fprintf(e.stdout, "totals    every key's total equals the sum of its input records: nothing lost, nothing counted twice\n")
		} else {
			fmt.Fprintf(e.stdout, "totals    %d of %d keys WRONG:\n", rep.Wrong, rep.Keys)
			for _, x := range rep.Examples {
				fmt.Fprintf(e.stdout, "            %s\n", x)
			}
		}
	}
	if rep.Wrong > 0 || len(rep.MemberErrors) > 0 {
		return exitFailure
	}
	return exitOK
}

// warmupDemo runs examples/stateful's warm-up proof on an embedded broker and prints its report.
func warmupDemo(e *env, keys int, seed int64, asJSON, verbose bool, data string) int {
	dir := data
	if dir == "" {
		d, err := os.MkdirTemp("", "pctl-demo-")
		if err != nil {
			return failErr(e, "demo", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	b, err := broker.Start(e.ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		return failErr(e, "demo", err)
	}
	defer b.Close()
	cfg := stateful.WarmUpConfig{Keys: keys, Seed: seed}
	if !asJSON {
		fmt.Fprintf(e.stdout, "pctl demo --stateful --warmup: broker in %s; running totals of %d keys, changelog topic cl; group totals (sticky assignor)\n", dir, keys)
		cfg.Logf = func(f string, a ...any) { fmt.Fprintf(e.stdout, "  "+f+"\n", a...) }
	}
	if verbose {
		cfg.MemberLogf = func(f string, a ...any) { fmt.Fprintf(e.stderr, "pctl demo: "+f+"\n", a...) }
	}
	rep, err := stateful.RunWarmUp(e.ctx, b, cfg)
	if err != nil {
		return failErr(e, "demo", err)
	}
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		fmt.Fprintf(e.stdout, "\nrecords   %d, all acknowledged; %d keys; a changelog history of %d records\n", rep.Records, rep.Keys, rep.Prefill)
		fmt.Fprintf(e.stdout, "members   applied %d, skipped %d redelivered, %d state loads, %d flushes\n",
			rep.Stats.Applied, rep.Stats.Duplicates, rep.Stats.Loads, rep.Stats.Flushes)
		fmt.Fprintf(e.stdout, "pauses    the longest gap between two records of one key while a member joins:\n")
		fmt.Fprintf(e.stdout, "            without warm-up %v (key %s; the joiner's loads took %v)\n", rep.Cold.Round(time.Millisecond), rep.ColdKey, rep.ColdLoad.Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "            with warm-up    %v (key %s; %v warming as a standby, lag %d at the cut-over, loads after it %v)\n",
			rep.Warm.Round(time.Millisecond), rep.WarmKey, rep.WarmUp.Warmed.Round(time.Millisecond), rep.WarmUp.Lag, rep.WarmLoad.Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "          ratio %.2f\n", rep.Ratio)
		for _, m := range rep.MemberErrors {
			fmt.Fprintf(e.stdout, "member    stopped with an error: %s\n", m)
		}
		if rep.Wrong == 0 {
			fmt.Fprintf(e.stdout, "totals    every key's total equals the sum of its input records: nothing lost, nothing counted twice\n")
		} else {
			fmt.Fprintf(e.stdout, "totals    %d of %d keys WRONG:\n", rep.Wrong, rep.Keys)
			for _, x := range rep.Examples {
				fmt.Fprintf(e.stdout, "            %s\n", x)
			}
		}
	}
	if rep.Wrong > 0 || len(rep.MemberErrors) > 0 {
		return exitFailure
	}
	return exitOK
}
