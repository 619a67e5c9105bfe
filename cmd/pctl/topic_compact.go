package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// The CLI's side of compacted topics and backfill (spec/protocol.md §10): the create flags, what
// 'topic describe' shows of them, and 'topic retire'.

const compactCreateHelp = `
--compact makes a compacted topic: every partition keeps at least the latest record of every key
(one subject per key, JetStream's per-subject limit of 1), every record needs a key, and a
tombstone ('pctl produce --tombstones') deletes its key; the tombstone itself is removed after
--delete-retention (default 24h, at least 1s). At every epoch change the broker backfills: it
copies every key's latest record from the old epoch into the new one while producers keep
writing (a copy never replaces a newer record), so that the current epoch alone holds every
key's latest value ('pctl consume --from current-epoch'); 'pctl topic describe' shows the
progress, and 'pctl topic retire' deletes old epochs afterwards. Fixed at creation. (--backfill,
copying a plain topic's whole history, is refused for now: spec/protocol.md §10.3 says why.)
`

// compactFlags are topic create's compaction flags.
type compactFlags struct {
	compact, compacted *bool
	retention          *time.Duration
	backfill           *bool
}

func addCompactFlags(fs *flag.FlagSet) *compactFlags {
	return &compactFlags{
		compact:   fs.Bool("compact", false, "a compacted topic: the latest record of every key is kept, tombstones delete keys, epoch changes backfill"),
		compacted: fs.Bool("compacted", false, "the same as --compact"),
		retention: fs.Duration("delete-retention", 0, "with --compact: how long a tombstone is kept, at least 1s (default 24h)"),
		backfill:  fs.Bool("backfill", false, "a plain topic whose epoch changes copy its history (refused by the broker for now)"),
	}
}

// request checks the flags and returns the request's compaction fields.
func (f *compactFlags) request(e *env, cmd string, fs *flag.FlagSet) (wire.CreateTopicRequest, int) {
	var req wire.CreateTopicRequest
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	compact := *f.compact || *f.compacted
	switch {
	case compact && *f.backfill:
		return req, usageErr(e, cmd, "--backfill is for plain topics: a compacted topic (--compact) always backfills")
	case set["delete-retention"] && !compact:
		return req, usageErr(e, cmd, "--delete-retention is a compacted topic's: give --compact too")
	case set["delete-retention"] && *f.retention < time.Second:
		return req, usageErr(e, cmd, "--delete-retention %v: give at least 1s (a tombstone must outlive a backfill: hours are usual)", *f.retention)
	}
	req.Compact, req.Backfill = compact, *f.backfill
	if set["delete-retention"] {
		req.DeleteRetentionMS = f.retention.Milliseconds()
	}
	return req, -1
}

// compactionSuffix is ", compacted (tombstones kept 24h0m0s)" or ", backfills", or "".
func compactionSuffix(t *wire.Topic) string {
	switch {
	case t.Compact != nil:
		return fmt.Sprintf(", compacted (tombstones kept %v)", time.Duration(t.Compact.Retention())*time.Millisecond)
	case t.Backfill:
		return ", backfills its history at epoch changes"
	}
	return ""
}

// describeCompaction writes the topic-wide lines: compaction, backfill running, retirement.
func describeCompaction(w io.Writer, t *wire.Topic) {
	switch {
	case t.Compact != nil:
		held := ""
		if t.Compact.Held() {
			held = " (a tombstone written while the backfill runs is held: kept until its epoch is retired, spec/protocol.md §10.2)"
		}
		fmt.Fprintf(w, "compaction\tcompacted: the latest record of every key; tombstones kept %v%s\n", time.Duration(t.Compact.Retention())*time.Millisecond, held)
	case t.Backfill:
		fmt.Fprintf(w, "compaction\tnone (plain topic); epoch changes backfill its history\n")
	default:
		fmt.Fprintf(w, "compaction\tnone (plain topic, no backfill)\n")
	}
	if !t.Backfills() {
		return
	}
	if ep := t.Backfilling(); ep != nil {
		fmt.Fprintf(w, "backfill\tinto epoch %d, running: %s\n", ep.Epoch, backfillProgress(t, ep))
	} else {
		fmt.Fprintf(w, "backfill\tnone running\n")
	}
	if r := t.Retiring; r != nil {
		state := "checking the groups' positions"
		if r.Checked {
			state = "deleting the records"
		}
		fmt.Fprintf(w, "retiring\tepochs through %d, %s, started %s\n", r.Through, state, r.Started.Format(time.RFC3339))
	}
	var retained, retired []int
	for _, ep := range t.Epochs {
		if ep.Retired {
			retired = append(retired, ep.Epoch)
		} else {
			retained = append(retained, ep.Epoch)
		}
	}
	fmt.Fprintf(w, "retained\tepochs %s%s\n", rangeList(retained), retiredText(retired))
}

// rangeList is "1-3, 5" ("none" when empty): epochs or partitions.
func rangeList(xs []int) string {
	if len(xs) == 0 {
		return "none"
	}
	s := ""
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if s != "" {
			s += ", "
		}
		if j == i {
			s += fmt.Sprint(xs[i])
		} else {
			s += fmt.Sprintf("%d-%d", xs[i], xs[j])
		}
		i = j + 1
	}
	return s
}

func retiredText(retired []int) string {
	if len(retired) == 0 {
		return ""
	}
	return "; retired (records deleted): " + rangeList(retired)
}

// describeEpochBackfill writes an epoch's backfill and retirement lines.
func describeEpochBackfill(w io.Writer, t *wire.Topic, ep *wire.Epoch) {
	if ep.Retired {
		fmt.Fprintf(w, "  records\tretired (deleted; every key's latest record was carried into a later epoch)\n")
	}
	bf := ep.Backfill
	if bf == nil {
		return
	}
	switch bf.State {
	case wire.BackfillRunning:
		fmt.Fprintf(w, "  backfill\trunning: %s\n", backfillProgress(t, ep))
	default:
		took := ""
		if p := t.BackfillProgress(ep.Epoch, time.Now()); bf.Ended != nil {
			took = fmt.Sprintf(", took %v (%.0f keys/s)", p.Elapsed.Round(time.Millisecond), p.KeysPerSecond)
		}
		fmt.Fprintf(w, "  backfill\tdone: %d copies, %d refused (the key had a newer record), %d tombstones expired%s\n", bf.Copied, bf.Newer, bf.Expired, took)
	}
}

// backfillProgress words a running backfill: partitions done, records handled of the old
// epoch's, copies, and how long it runs (wire.Topic.BackfillProgress, which the status page
// shows too).
func backfillProgress(t *wire.Topic, ep *wire.Epoch) string {
	p := t.BackfillProgress(ep.Epoch, time.Now())
	return fmt.Sprintf("%d of %d old partitions done, %d of %d stored messages of epoch %d handled, %d copies, %d refused as older, running %v, %.0f keys/s",
		p.PartitionsDone, len(p.Partitions), p.Handled, p.Total, p.From, p.Copied, p.Newer, p.Elapsed.Round(time.Second), p.KeysPerSecond)
}

func cmdTopicRetire(e *env, args []string) int {
	const cmd = "topic retire"
	fs := newFlags(e, cmd, "topic retire TOPIC [--through EPOCH] [--json]", `
Deletes the records of a topic's old epochs (spec/protocol.md §10.7): of every epoch up to
--through (default: every ended epoch). It is refused, and deletes nothing, unless the topic
backfills (--compact or --backfill at creation), the backfill into every epoch up to one after
--through has ended (the current epoch then holds every key's latest record), and every
consumer group of the topic is past those epochs' boundaries (the refusal names the group and
partition that is not). 'pctl topic describe' shows which epochs are retained. Needs the admin
role.

Exit status: 0 retired; 2 bad flags, an unknown topic, or a topic that cannot be retired (it
does not backfill, or no ended epoch up to --through); 1 a group is behind (in_use), a backfill
or an epoch change is running (change_in_progress: try again when 'pctl topic describe' shows
it done), or another failure.
`+connHelp)
	cf := addConnFlags(fs)
	through := fs.Int("through", 0, "retire epochs up to this `EPOCH` (0: every ended epoch)")
	asJSON := fs.Bool("json", false, "print the new descriptor as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	if *through < 0 {
		return usageErr(e, cmd, "--through %d: give an epoch number (1, 2, ...) or 0 for every ended epoch", *through)
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	t, err := c.RetireEpochs(e.ctx, name, *through)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, t)
	}
	var retired []int
	for _, ep := range t.Epochs {
		if ep.Retired {
			retired = append(retired, ep.Epoch)
		}
	}
	fmt.Fprintf(e.stdout, "topic %s: epochs %s retired (their records deleted); epoch %d holds every key's latest record\n", t.Name, rangeList(retired), t.Current().Epoch)
	return exitOK
}
