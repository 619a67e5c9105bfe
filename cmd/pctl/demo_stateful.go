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
	return withDemoBroker(e, data, func(b *broker.Broker, dir string) int {
		cfg := stateful.ScaleOutConfig{Keys: keys, Seed: seed}
		cfg.Logf, cfg.MemberLogf = demoLogs(e, asJSON, verbose,
			"pctl demo --stateful: broker in %s; running totals of %d keys, changelog topic cl; group totals (sticky assignor)\n", dir, keys)
		rep, err := stateful.RunScaleOut(e.ctx, b, cfg)
		if err != nil {
			return failErr(e, "demo", err)
		}
		if asJSON {
			return statefulJSON(e, rep, rep.Wrong, rep.MemberErrors)
		}
		fmt.Fprintf(e.stdout, "\nrecords   %d, all acknowledged; %d keys\n", rep.Records, rep.Keys)
		fmt.Fprintf(e.stdout, "members   applied %d, skipped %d redelivered after the crash, %d state loads, %d flushes\n",
			rep.Stats.Applied, rep.Stats.Duplicates, rep.Stats.Loads, rep.Stats.Flushes)
		fmt.Fprintf(e.stdout, "pauses    the longest gap between two records of one key, per phase:\n")
		for _, p := range rep.Phases {
			fmt.Fprintf(e.stdout, "            %-34s %v (key %s)\n", p.Name, p.Longest.Round(time.Millisecond), p.Key)
		}
		fmt.Fprintf(e.stdout, "          scale-out (members, expansions, swap) %v vs stop-and-restore %v: ratio %.2f\n",
			rep.ScaleOut.Round(time.Millisecond), rep.Baseline.Round(time.Millisecond), rep.Ratio)
		return demoTotals(e, rep.Wrong, rep.Keys, rep.Examples, rep.MemberErrors)
	})
}

// warmupDemo runs examples/stateful's warm-up proof on an embedded broker and prints its report.
func warmupDemo(e *env, keys int, seed int64, asJSON, verbose bool, data string) int {
	return withDemoBroker(e, data, func(b *broker.Broker, dir string) int {
		cfg := stateful.WarmUpConfig{Keys: keys, Seed: seed}
		cfg.Logf, cfg.MemberLogf = demoLogs(e, asJSON, verbose,
			"pctl demo --stateful --warmup: broker in %s; running totals of %d keys, changelog topic cl; group totals (sticky assignor)\n", dir, keys)
		rep, err := stateful.RunWarmUp(e.ctx, b, cfg)
		if err != nil {
			return failErr(e, "demo", err)
		}
		if asJSON {
			return statefulJSON(e, rep, rep.Wrong, rep.MemberErrors)
		}
		fmt.Fprintf(e.stdout, "\nrecords   %d, all acknowledged; %d keys; a changelog history of %d records\n", rep.Records, rep.Keys, rep.Prefill)
		fmt.Fprintf(e.stdout, "members   applied %d, skipped %d redelivered, %d state loads, %d flushes\n",
			rep.Stats.Applied, rep.Stats.Duplicates, rep.Stats.Loads, rep.Stats.Flushes)
		fmt.Fprintf(e.stdout, "pauses    the longest gap between two records of one key while a member joins:\n")
		fmt.Fprintf(e.stdout, "            without warm-up %v (key %s; the joiner's loads took %v)\n", rep.Cold.Round(time.Millisecond), rep.ColdKey, rep.ColdLoad.Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "            with warm-up    %v (key %s; %v warming as a standby, lag %d at the cut-over, loads after it %v)\n",
			rep.Warm.Round(time.Millisecond), rep.WarmKey, rep.WarmUp.Warmed.Round(time.Millisecond), rep.WarmUp.Lag, rep.WarmLoad.Round(time.Millisecond))
		fmt.Fprintf(e.stdout, "          ratio %.2f\n", rep.Ratio)
		return demoTotals(e, rep.Wrong, rep.Keys, rep.Examples, rep.MemberErrors)
	})
}

// withDemoBroker runs f on an embedded broker whose data is in data (a temp dir, removed after,
// when data is empty).
func withDemoBroker(e *env, data string, f func(b *broker.Broker, dir string) int) int {
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
	return f(b, dir)
}

// demoLogs prints the demo's heading (format with args) and returns its progress log (standard
// output, not with --json) and the members' log (standard error, with --verbose).
func demoLogs(e *env, asJSON, verbose bool, format string, args ...any) (logf, memberLogf func(string, ...any)) {
	if !asJSON {
		fmt.Fprintf(e.stdout, format, args...)
		logf = func(f string, a ...any) { fmt.Fprintf(e.stdout, "  "+f+"\n", a...) }
	}
	if verbose {
		memberLogf = func(f string, a ...any) { fmt.Fprintf(e.stderr, "pctl demo: "+f+"\n", a...) }
	}
	return logf, memberLogf
}

// statefulJSON prints a report as indented JSON and returns the demo's exit code.
func statefulJSON(e *env, rep any, wrong int, memberErrors []string) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
	return demoExit(wrong, memberErrors)
}

// demoTotals prints the members' errors and the checker's verdict, and returns the exit code.
func demoTotals(e *env, wrong, keys int, examples, memberErrors []string) int {
	for _, m := range memberErrors {
		fmt.Fprintf(e.stdout, "member    stopped with an error: %s\n", m)
	}
	if wrong == 0 {
		fmt.Fprintf(e.stdout, "totals    every key's total equals the sum of its input records: nothing lost, nothing counted twice\n")
	} else {
		fmt.Fprintf(e.stdout, "totals    %d of %d keys WRONG:\n", wrong, keys)
		for _, x := range examples {
			fmt.Fprintf(e.stdout, "            %s\n", x)
		}
	}
	return demoExit(wrong, memberErrors)
}

// demoExit fails the demo when a key's total is wrong or a member stopped with an error.
func demoExit(wrong int, memberErrors []string) int {
	if wrong > 0 || len(memberErrors) > 0 {
		return exitFailure
	}
	return exitOK
}
