package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"pctl.dev/pctl/client/verify"
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
  - duplicates: records delivered again (allowed after a member crash).

--delivered takes FILE (group "default") or GROUP=FILE; repeat it for more members or groups.
Exit status 0 if no group lost a record or broke an order, 1 otherwise, 2 for bad input.

Example:
  pctl produce orders --log sent.jsonl < records.tsv
  pctl consume orders --group g --from-beginning --format jsonl --idle-exit 2s > got.jsonl
  pctl verify --sent sent.jsonl --delivered g=got.jsonl
`

func cmdVerify(e *env, args []string) int {
	const cmd = "verify"
	fs := newFlags(e, cmd, "verify --sent FILE [--sent FILE...] --delivered [GROUP=]FILE [...] [--json]", verifyHelp)
	var sentFiles, delivFiles multiFlag
	fs.Var(&sentFiles, "sent", "producer log `FILE` (repeatable)")
	fs.Var(&delivFiles, "delivered", "consumer output `[GROUP=]FILE` (repeatable)")
	asJSON := fs.Bool("json", false, "print the reports as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 || len(sentFiles) == 0 || len(delivFiles) == 0 {
		return usageErr(e, cmd, "give at least one --sent FILE and one --delivered [GROUP=]FILE, and no other arguments")
	}
	var sent []verify.Sent
	for _, f := range sentFiles {
		s, err := readVerifyFile(f, func(b []byte) (verify.Sent, error) {
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
	var delivered []verify.Delivered
	perGroup := map[string]int{}
	for _, arg := range delivFiles {
		group, file := "default", arg
		if g, f, ok := strings.Cut(arg, "="); ok {
			group, file = g, f
		}
		perGroup[group]++
		line := int64(0)
		ds, err := readVerifyFile(file, func(b []byte) (verify.Delivered, error) {
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
			d := verify.Delivered{Group: group, Producer: r.Producer, PSeq: r.PSeq, Order: line}
			if r.TS != 0 {
				d.Order = r.TS
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
		if perGroup[group] > 1 && len(ds) > 0 && ds[0].Order < 1e15 {
			return usageErr(e, cmd, "group %s has several outputs: consume with --timestamps so that they can be merged in delivery order", group)
		}
		delivered = append(delivered, ds...)
	}
	reports := verify.Check(sent, delivered)
	ok := true
	for _, r := range reports {
		ok = ok && r.OK()
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(reports)
	} else {
		for _, r := range reports {
			fmt.Fprintln(e.stdout, r)
			for _, ex := range r.Examples {
				fmt.Fprintf(e.stdout, "  %s\n", ex)
			}
		}
	}
	if !ok {
		return exitFailure
	}
	return exitOK
}

func readVerifyFile[T any](path string, parse func([]byte) (T, error)) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
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
	return out, sc.Err()
}
