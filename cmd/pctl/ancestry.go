package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/ancestry"
	"pctl.dev/pctl/internal/interrupt"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/runtime"
)

func init() {
	register(command{name: "ancestry", summary: "compute split ancestry offline: which old partitions feed each new one", run: cmdAncestry})
}

const ancestryHelp = `
Computes the partition-level split ancestry of an epoch change from N partitions with plugin P to
M partitions with plugin Q (default: P again): for each new partition (child), the old partitions
(parents) whose keys may now be in it.

Sources, as the broker uses them:
  declared  the plugin's own pctl_ancestry (only when the function and config do not change);
  observed  both functions evaluated over the keys in --keys FILE (one key per line; --hex);
  all       every old partition (nothing better is known).
With both a declaration and --keys, the keys are also checked against the declaration, and any
key that contradicts it is reported (exit 1).

Examples:
  pctl ancestry --plugin linear-murmur2 --from 4 --to 5
  pctl ancestry --plugin librdkafka-consistent --from 6 --to 6 --to-plugin kafka-murmur2 --keys keys.txt
`

func cmdAncestry(e *env, args []string) int {
	const cmd = "ancestry"
	fs := newFlags(e, cmd, "ancestry --plugin P --from N --to M [--to-plugin Q] [--keys FILE] [--hex] [--config K=V] [--to-config K=V] [--json | --graph text|dot|svg]", ancestryHelp)
	plugin := fs.String("plugin", "", "the old epoch's plugin: built-in name, sha256:DIGEST or FILE.wasm (required)")
	toPlugin := fs.String("to-plugin", "", "the new epoch's plugin (default: --plugin)")
	from := fs.String("from", "", "old partition count (required)")
	to := fs.String("to", "", "new partition count (required)")
	keysFile := fs.String("keys", "", "`FILE` of keys, one per line, for observed ancestry")
	hexKeys := fs.Bool("hex", false, "keys in --keys are hex-encoded")
	asJSON := fs.Bool("json", false, "print JSON")
	graphFmt := fs.String("graph", "", "print the ancestry as a graph: `FORMAT` text, dot or svg (edges sized by --keys)")
	var cfgOld, cfgNew multiFlag
	fs.Var(&cfgOld, "config", "old plugin config `K=V` (repeatable)")
	fs.Var(&cfgNew, "to-config", "new plugin config `K=V` (repeatable; default: --config when the plugin is the same)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 || *plugin == "" {
		return usageErr(e, cmd, "give --plugin, --from and --to (and no arguments); see --help")
	}
	nFrom, err := parsePartitions(*from)
	if err != nil {
		return usageErr(e, cmd, "--from: %v", strings.TrimPrefix(err.Error(), "--partitions "))
	}
	nTo, err := parsePartitions(*to)
	if err != nil {
		return usageErr(e, cmd, "--to: %v", strings.TrimPrefix(err.Error(), "--partitions "))
	}
	if st := checkGraphFormat(e, cmd, *graphFmt, *asJSON); st >= 0 {
		return st
	}
	if nTo > 1<<20 {
		return usageErr(e, cmd, "--to %d: at most 1048576 children are listed", nTo)
	}
	oldCfg, err := partitioner.EncodeConfig(cfgOld)
	if err != nil {
		return usageErr(e, cmd, "%v", err)
	}
	samePlugin := *toPlugin == "" || *toPlugin == *plugin
	newCfg := oldCfg
	if len(cfgNew) > 0 || !samePlugin {
		if newCfg, err = partitioner.EncodeConfig(cfgNew); err != nil {
			return usageErr(e, cmd, "%v", err)
		}
	}
	if *toPlugin == "" {
		*toPlugin = *plugin
	}
	lib, err := newLibrary(e, runtime.Config{})
	if err != nil {
		return failErr(e, cmd, err)
	}
	defer lib.Runtime().Close(e.ctx)
	fOld, err := lib.Open(e.ctx, *plugin, oldCfg, runtime.PoolOptions{Size: 1})
	if err != nil {
		return openErr(e, cmd, err)
	}
	defer fOld.Close()
	fNew, err := lib.Open(e.ctx, *toPlugin, newCfg, runtime.PoolOptions{Size: 1})
	if err != nil {
		return openErr(e, cmd, err)
	}
	defer fNew.Close()
	sameFunc := fOld.Digest() == fNew.Digest() && string(oldCfg) == string(newCfg)

	type child struct {
		Child   int      `json:"child"`
		Parents [][2]int `json:"parents"`
	}
	report := struct {
		Source         string   `json:"source"`
		From           int32    `json:"from"`
		To             int32    `json:"to"`
		Children       []child  `json:"children"`
		Keys           int      `json:"keys,omitempty"`
		Contradictions []string `json:"contradictions,omitempty"`
	}{Source: "all", From: nFrom, To: nTo}

	var declared [][][2]int // nil: none
	if sameFunc {
		d, err := ancestry.Declared(fOld, int(nFrom), int(nTo))
		switch {
		case err == nil:
			report.Source, declared = "declared", d
		case !errors.Is(err, partitioner.ErrNoAncestry):
			return failErr(e, cmd, err)
		}
	}
	obs := ancestry.NewObserver(int(nFrom), int(nTo), *graphFmt != "")
	if *keysFile != "" {
		f, err := os.Open(*keysFile)
		if err != nil {
			return usageErr(e, cmd, "--keys: %v", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(interrupt.Reader(e.ctx, f)) // SIGINT stops a blocked FIFO too
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for line := 1; sc.Scan(); line++ {
			key := []byte(sc.Text())
			if *hexKeys {
				if key, err = hex.DecodeString(sc.Text()); err != nil {
					return usageErr(e, cmd, "--keys line %d: not hex: %v", line, err)
				}
			}
			p, err1 := fOld.Partition(key, nFrom)
			c, err2 := fNew.Partition(key, nTo)
			if err1 != nil || err2 != nil {
				return failErr(e, cmd, errors.Join(err1, err2))
			}
			obs.Add(key, int(p), int(c))
			report.Keys++
			if declared != nil && !ancestry.Contains(declared[c], int(p)) && len(report.Contradictions) < 20 {
				report.Contradictions = append(report.Contradictions, fmt.Sprintf("key %q: partition %d of %d goes to child %d of %d, which declares parents %s", key, p, nFrom, c, nTo, rangesText(declared[c])))
			}
		}
		if err := sc.Err(); err != nil {
			if e.ctx.Err() != nil {
				return usageFail(e, cmd, "interrupted while reading --keys (%d keys read); nothing printed", report.Keys)
			}
			return failErr(e, cmd, err)
		}
		if report.Source == "all" {
			report.Source = "observed"
		}
	}
	var parents [][][2]int
	switch report.Source {
	case "declared":
		parents = declared
	case "observed":
		parents = obs.Parents()
	default:
		parents = ancestry.All(int(nFrom), int(nTo))
	}
	for c, ps := range parents {
		report.Children = append(report.Children, child{Child: c, Parents: ps})
	}
	if *graphFmt != "" {
		// The same renderer as 'pctl topic describe --graph', on a two-epoch topic.
		anc := &wire.Ancestry{Source: report.Source}
		for _, ch := range report.Children {
			anc.Parents = append(anc.Parents, ch.Parents)
		}
		if *keysFile != "" {
			anc.Keys = obs.EdgeKeys()
		}
		t := &wire.Topic{Name: "ancestry", Epochs: []wire.Epoch{
			{Epoch: 1, Partitioner: wire.Partitioner{Name: fOld.Name()}, Partitions: int(nFrom)},
			{Epoch: 2, Partitioner: wire.Partitioner{Name: fNew.Name()}, Partitions: int(nTo), Ancestry: anc}}}
		if st := writeGraph(e, cmd, t, *graphFmt); st != exitOK {
			return st
		}
	} else if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report)
	} else {
		w := bufio.NewWriter(e.stdout)
		fmt.Fprintf(w, "ancestry %s -> %s, %d -> %d partitions: %s", fOld.Name(), fNew.Name(), nFrom, nTo, report.Source)
		if report.Keys > 0 {
			fmt.Fprintf(w, " (%d keys)", report.Keys)
		}
		fmt.Fprintln(w)
		for _, ch := range report.Children {
			fmt.Fprintf(w, "  %d <- %s\n", ch.Child, rangesText(ch.Parents))
		}
		for _, c := range report.Contradictions {
			fmt.Fprintf(w, "CONTRADICTION: %s\n", c)
		}
		w.Flush()
	}
	if len(report.Contradictions) > 0 {
		return exitFailure
	}
	return exitOK
}
