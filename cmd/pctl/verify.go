package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"pctl.dev/pctl/client/verify"
	"pctl.dev/pctl/internal/interrupt"
)

func init() {
	register(command{name: "verify", summary: "check what producers sent against what consumer groups delivered: order, losses, duplicates", run: cmdVerify})
}

const verifyHelp = `
An independent order checker. It reads what producers sent (their own logs: 'pctl produce --log
FILE') and what consumer groups delivered ('pctl consume --format jsonl' output; add
--timestamps when a group has several members, so that their outputs can be merged in delivery
order), and reports, per group:

  - lost records: acknowledged to a producer, never delivered;
  - order violations: for a producer and a key, a record delivered for the first time before an
    earlier acknowledged record of the same producer and key;
  - wrong keys: a record delivered with another key than it was sent with (or keyless when it
    was sent with a key, or the other way round);
  - unexpected records: delivered, but no sent log contains them. The check assumes that the
    logs of ALL producers were given; with --partial-logs, records of producers that no log
    names are counted as "from producers without a log" instead (a producer whose log was
    given must still have logged every record delivered);
  - duplicates: records delivered again (allowed after a member crash; --no-duplicates makes
    them a failure, for runs without a crash);

and, for the sent logs, a (producer, pseq) that appears more than once: a producer that reused a
sequence number (or the same log given twice). The records are never merged: the check fails.

--delivered takes FILE (group "default") or GROUP=FILE; repeat it for more members or groups. A
group named there, or with --expect-group GROUP, is checked even if it delivered nothing (an
empty file): then every acknowledged record is lost.

--compacted checks a compacted topic (spec/protocol.md §10), whose partitions keep only each
key's latest record: an acknowledged record that was not delivered counts as "compacted away",
not lost, when a later record of the same producer and key was delivered (the latest one never
is); the order rule is that a producer and key's first deliveries come in increasing sequence.
Give each key one producer: records of one key from several producers have no order the checker
knows.

Exit status 0 if every check passed, 1 if any failed, 2 for bad input. --json prints every
count: {"sent", "acked", "producers", "reused_seqs", "failures": [...], "groups": [{"group",
"deliveries", "distinct", "lost", "violations", "wrong_key", "duplicates", "unacked",
"unexpected", "unlogged", "compacted", "failures": [...], "examples": [...]}, ...]};
"failures" is empty when that part is OK.

Example:
  pctl produce orders --log sent.jsonl < records.tsv
  pctl consume orders --group g --from-beginning --format jsonl --idle-exit 2s > got.jsonl
  pctl verify --sent sent.jsonl --delivered g=got.jsonl
`

func cmdVerify(e *env, args []string) int {
	const cmd = "verify"
	fs := newFlags(e, cmd, "verify --sent FILE [--sent FILE...] --delivered [GROUP=]FILE [...] [--expect-group GROUP...] [--partial-logs] [--no-duplicates] [--compacted] [--json]", verifyHelp)
	var sentFiles, delivFiles, expect multiFlag
	fs.Var(&sentFiles, "sent", "producer log `FILE` (repeatable); give every producer's log unless --partial-logs")
	fs.Var(&delivFiles, "delivered", "consumer output `[GROUP=]FILE` (repeatable)")
	fs.Var(&expect, "expect-group", "a `GROUP` that must have delivered every acknowledged record, even if no --delivered file names it (repeatable)")
	partial := fs.Bool("partial-logs", false, "not every producer's log was given: records of producers without a log are not failures")
	noDups := fs.Bool("no-duplicates", false, "fail on any duplicate delivery (for runs where no member crashed)")
	compacted := fs.Bool("compacted", false, "the topic is compacted: a record not delivered is not lost when a later record of its producer and key was")
	asJSON := fs.Bool("json", false, "print the result as JSON, with every count")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 || len(sentFiles) == 0 || (len(delivFiles) == 0 && len(expect) == 0) {
		return usageErr(e, cmd, "give at least one --sent FILE and one --delivered [GROUP=]FILE (or --expect-group GROUP), and no other arguments")
	}
	var sent []verify.Sent
	for _, f := range sentFiles {
		s, err := readVerifyFile(e.ctx, f, func(b []byte) (verify.Sent, error) {
			var v verify.Sent
			err := json.Unmarshal(b, &v)
			if err == nil && v.Producer == "" {
				err = fmt.Errorf("no \"producer\" field (is this a 'pctl produce --log' file?)")
			}
			return v, err
		})
		if err != nil {
			return usageErr(e, cmd, "--sent %s: %v", f, err)
		}
		sent = append(sent, s...)
	}
	opts := verify.Options{PartialLogs: *partial, NoDuplicates: *noDups, Compacted: *compacted}
	named := map[string]bool{}
	for _, g := range expect {
		if g == "" {
			return usageErr(e, cmd, "--expect-group: give a group name")
		}
		if !named[g] {
			named[g] = true
			opts.Groups = append(opts.Groups, g)
		}
	}
	var delivered []verify.Delivered
	files := map[string]int{}      // outputs per group
	unstamped := map[string]bool{} // a group with an output line without "ts"
	for _, arg := range delivFiles {
		group, file := "default", arg
		if g, f, ok := strings.Cut(arg, "="); ok {
			group, file = g, f
		}
		if group == "" || file == "" {
			return usageErr(e, cmd, "--delivered %q: give FILE or GROUP=FILE", arg)
		}
		if !named[group] {
			named[group] = true
			opts.Groups = append(opts.Groups, group)
		}
		files[group]++
		line := int64(0)
		ds, err := readVerifyFile(e.ctx, file, func(b []byte) (verify.Delivered, error) {
			var r struct {
				Key      *string `json:"key"`
				KeyB64   *string `json:"key_b64"`
				Producer string  `json:"producer"`
				PSeq     uint64  `json:"pseq"`
				TS       int64   `json:"ts"`
			}
			if err := json.Unmarshal(b, &r); err != nil {
				return verify.Delivered{}, err
			}
			if r.Producer == "" || r.PSeq == 0 {
				return verify.Delivered{}, fmt.Errorf("no \"producer\"/\"pseq\" fields (is this 'pctl consume --format jsonl' output?)")
			}
			line++
			d := verify.Delivered{Group: group, Member: file, Producer: r.Producer, PSeq: r.PSeq, Order: line}
			if r.TS != 0 {
				d.Order = r.TS
			} else {
				unstamped[group] = true
			}
			switch {
			case r.Key != nil:
				d.Key = []byte(*r.Key)
			case r.KeyB64 != nil:
				k, err := base64.StdEncoding.DecodeString(*r.KeyB64)
				if err != nil {
					return d, fmt.Errorf("key_b64: %v", err)
				}
				d.Key = k
			default:
				d.NoKey = true
			}
			return d, nil
		})
		if err != nil {
			return usageErr(e, cmd, "--delivered %s: %v", file, err)
		}
		delivered = append(delivered, ds...)
	}
	for g, n := range files {
		if n > 1 && unstamped[g] {
			return usageErr(e, cmd, "group %s has %d outputs and some lines have no \"ts\": consume with --timestamps so that they can be merged in delivery order", g, n)
		}
	}
	res := verify.Check(sent, delivered, opts)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
	} else {
		fmt.Fprintln(e.stdout, res)
	}
	if !res.OK() {
		return exitFailure
	}
	return exitOK
}

func readVerifyFile[T any](ctx context.Context, path string, parse func([]byte) (T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(interrupt.Reader(ctx, f)) // a FIFO that blocks must not hold off SIGINT
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		v, err := parse(sc.Bytes())
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		out = append(out, v)
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted while reading %s", path)
	}
	return out, sc.Err()
}
