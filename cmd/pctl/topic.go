package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/partitioner"
)

// topicSubs are the `pctl topic` subcommands.
var topicSubs = map[string]command{}

func init() {
	register(command{name: "topic", summary: "create, describe, list, delete and repartition topics; show consumer groups", run: cmdTopic})
	topicSubs["create"] = command{name: "create", summary: "create a topic", run: cmdTopicCreate}
	topicSubs["describe"] = command{name: "describe", summary: "show a topic: epochs, partitioners, boundaries, ancestry, change in progress", run: cmdTopicDescribe}
	topicSubs["list"] = command{name: "list", summary: "list the topics", run: cmdTopicList}
	topicSubs["delete"] = command{name: "delete", summary: "delete a topic and all its records", run: cmdTopicDelete}
	topicSubs["repartition"] = command{name: "repartition", summary: "start a new epoch: partition count, partitioner or config", run: cmdTopicRepartition}
	topicSubs["expand"] = command{name: "expand", summary: "grow a topic's partition count (a repartition)", run: cmdTopicExpand}
	topicSubs["set"] = command{name: "set", summary: "change a live topic's replicas or placement tags", run: cmdTopicSet}
	topicSubs["groups"] = command{name: "groups", summary: "show a topic's consumer groups: members, positions, lag", run: cmdTopicGroups}
	topicSubs["retire"] = command{name: "retire", summary: "delete old epochs' records once backfill carried every key forward", run: cmdTopicRetire}
}

func cmdTopic(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stderr
		if len(args) > 0 {
			w = e.stdout
		}
		fmt.Fprintln(w, "Usage: pctl topic <subcommand> [flags]\n\nSubcommands:")
		for _, name := range sortedKeys(topicSubs) {
			fmt.Fprintf(w, "  %-12s %s\n", name, topicSubs[name].summary)
		}
		fmt.Fprintln(w, strings.TrimRight(connHelp, "\n"))
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := topicSubs[args[0]]
	if !ok {
		return usageErr(e, "topic", "unknown subcommand %q; one of: %s", args[0], strings.Join(sortedKeys(topicSubs), ", "))
	}
	return c.run(e, args[1:])
}

// topicArg checks that exactly one topic name was given.
func topicArg(e *env, cmd string, pos []string) (string, int) {
	if len(pos) != 1 {
		return "", usageErr(e, cmd, "give exactly one topic name (got %d arguments)", len(pos))
	}
	if err := wire.ValidTopic(pos[0]); err != nil {
		return "", usageErr(e, cmd, "%v", err)
	}
	return pos[0], -1
}

// parseCount parses a --partitions value (the broker checks the range).
func parseCount(e *env, cmd, s string) (int, int) {
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, usageErr(e, cmd, "--partitions %q is not an integer", s)
	}
	return v, -1
}

func writeJSON(e *env, cmd string, v any) int {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return failErr(e, cmd, err)
	}
	return exitOK
}

func cmdTopicCreate(e *env, args []string) int {
	const cmd = "topic create"
	fs := newFlags(e, cmd, "topic create TOPIC --partitions N --partitioner NAME|DIGEST [--config K=V ...] [--replicas R] [--placement-tags T,...] [--compact [--delete-retention D] | --backfill] [--json]", `
Creates a topic with epoch 1: N partition streams and a partitioner: a built-in name (see 'pctl
plugin list'), or an uploaded plugin's name or digest ('pctl plugin list --remote'; a unique prefix
of at least 6 hex digits will do; a name two uploaded plugins share is refused with their
digests). Needs the admin role.

--replicas R keeps R copies of every partition stream on different JetStream servers (default:
the broker's --replicas, 1 unless set); partitions added later by an epoch change get the same.
--placement-tags puts the streams only on servers that have all the given tags (nats-server's
server_tags; a tag starting with ! excludes servers that have it). Both are in the descriptor
('pctl topic describe') and can be changed later with 'pctl topic set'.
`+compactCreateHelp+connHelp)
	cf := addConnFlags(fs)
	cfl := addCompactFlags(fs) // topic_compact.go
	partitions := fs.String("partitions", "", "number of partitions (required)")
	plugin := fs.String("partitioner", "", "built-in name, uploaded plugin's name or digest (required)")
	var config multiFlag
	fs.Var(&config, "config", "partitioner config `K=V` (repeatable)")
	replicas := fs.Int("replicas", 0, "replicas of every partition stream, 1 to 5 (default: the broker's)")
	tags := fs.String("placement-tags", "", "place the partition streams on servers with all these comma-separated `TAGS`")
	asJSON := fs.Bool("json", false, "print the topic's descriptor as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	if *replicas < 0 || *replicas > 5 {
		return usageErr(e, cmd, "--replicas %d: a partition stream has 1 to 5 replicas", *replicas)
	}
	tagList, err := parseTags(*tags)
	if err != nil {
		return usageErr(e, cmd, "%v", err)
	}
	if *partitions == "" || *plugin == "" {
		return usageErr(e, cmd, "--partitions and --partitioner are required, e.g. --partitions 12 --partitioner kafka-murmur2")
	}
	n, st := parseCount(e, cmd, *partitions)
	if st >= 0 {
		return st
	}
	compactReq, st := cfl.request(e, cmd, fs)
	if st >= 0 {
		return st
	}
	cfg, err := partitioner.EncodeConfig(config)
	if err != nil {
		return usageErr(e, cmd, "--config: %v", err)
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	ref, err := resolvePluginRef(e.ctx, c, *plugin)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	req := wire.CreateTopicRequest{Topic: name, Partitions: n, Partitioner: ref, Config: cfg, Replicas: *replicas, PlacementTags: tagList}
	req.Compact, req.DeleteRetentionMS, req.Backfill = compactReq.Compact, compactReq.DeleteRetentionMS, compactReq.Backfill
	t, err := c.CreateTopic(e.ctx, req)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, t)
	}
	cur := t.Current()
	fmt.Fprintf(e.stdout, "created topic %s: epoch %d, %d partitions, partitioner %s, %s%s\n", t.Name, cur.Epoch, cur.Partitions, partitionerText(cur.Partitioner), replicasText(t), compactionSuffix(t))
	return exitOK
}

// parseTags splits a --placement-tags value.
func parseTags(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags []string
	for _, tag := range strings.Split(s, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "" || tag == "!" || strings.ContainsAny(tag, " \t") {
			return nil, fmt.Errorf("--placement-tags %q: give comma-separated tags without spaces, e.g. az:1,ssd (a leading ! excludes)", s)
		}
		tags = append(tags, tag)
	}
	return tags, nil
}

// replicasText is "R3" or "R3, placement tags a,b" (R? for a descriptor that predates replicas).
func replicasText(t *wire.Topic) string {
	r := "replicas: the broker's default"
	if t.Replicas > 0 {
		r = fmt.Sprintf("%d replica(s)", t.Replicas)
	}
	if len(t.PlacementTags) > 0 {
		r += ", placement tags " + strings.Join(t.PlacementTags, ",")
	}
	return r
}

func cmdTopicSet(e *env, args []string) int {
	const cmd = "topic set"
	fs := newFlags(e, cmd, "topic set TOPIC [--replicas R] [--placement-tags T,... | --clear-placement] [--json]", `
Changes a live topic's replicas or placement tags: every partition stream (retired ones too) is
updated, and the command returns when all of them are. JetStream adds, removes or moves the
replicas while records flow; producers and consumers carry on (a publish that meets a stream
while its leader moves is retried). Partitions added later by an epoch change get the new
values. Refused while an epoch change is in progress, and an epoch change waits for this.
Needs the admin role.
`+connHelp)
	cf := addConnFlags(fs)
	replicas := fs.Int("replicas", 0, "new number of replicas, 1 to 5 (default: unchanged)")
	tags := fs.String("placement-tags", "", "new placement `TAGS`, comma-separated (default: unchanged)")
	clearTags := fs.Bool("clear-placement", false, "remove the placement tags")
	asJSON := fs.Bool("json", false, "print the new descriptor as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	req := wire.SetTopicRequest{Topic: name, Replicas: *replicas}
	if set["replicas"] && (*replicas < 1 || *replicas > 5) {
		return usageErr(e, cmd, "--replicas %d: a partition stream has 1 to 5 replicas", *replicas)
	}
	if set["placement-tags"] && *clearTags {
		return usageErr(e, cmd, "--placement-tags and --clear-placement exclude each other")
	}
	if set["placement-tags"] {
		tagList, err := parseTags(*tags)
		if err != nil {
			return usageErr(e, cmd, "%v", err)
		}
		if len(tagList) == 0 {
			return usageErr(e, cmd, "--placement-tags is empty; use --clear-placement to remove the tags")
		}
		req.PlacementTags, req.SetPlacement = tagList, true
	}
	if *clearTags {
		req.SetPlacement = true
	}
	if req.Replicas == 0 && !req.SetPlacement {
		return usageErr(e, cmd, "nothing to change: give --replicas, --placement-tags or --clear-placement")
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	start := time.Now()
	t, err := setTopicFollowed(e, cmd, c, req) // follow.go: past the request timeout
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, t)
	}
	fmt.Fprintf(e.stdout, "topic %s: %s on every partition stream after %v\n", t.Name, replicasText(t), time.Since(start).Round(time.Millisecond))
	return exitOK
}

func cmdTopicDescribe(e *env, args []string) int {
	const cmd = "topic describe"
	fs := newFlags(e, cmd, "topic describe TOPIC [--json | --graph text|dot|svg]", `
Shows a topic: its id, every epoch with its partitioner (name, digest, config), partition count,
boundaries (the last sequence of each partition in that epoch) and ancestry (which partitions of
the previous epoch feed each partition), and any epoch change in progress. --json prints the
descriptor itself (spec/protocol.md §4).

--graph FORMAT prints the ancestry graph instead: text (lines), dot (Graphviz: pipe it to
'dot -Tpng') or svg (a picture, the one the status page of 'pctl serve --http' draws). Edges are
sized by the distinct keys the broker observed on them; epochs of more than 64 partitions are
drawn in runs of partitions.
`+connHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print the descriptor as JSON")
	graphFmt := fs.String("graph", "", "print the ancestry graph as `FORMAT`: text, dot or svg")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	if st := checkGraphFormat(e, cmd, *graphFmt, *asJSON); st >= 0 {
		return st
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	t, rev, err := c.Topic(e.ctx, name)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, t)
	}
	if *graphFmt != "" {
		return writeGraph(e, cmd, t, *graphFmt) // graph.go
	}
	describeTopic(e.stdout, t, rev)
	return exitOK
}

// describeTopic writes the human description of a descriptor.
func describeTopic(out io.Writer, t *wire.Topic, rev uint64) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	cur := t.Current()
	fmt.Fprintf(w, "topic\t%s\n", t.Name)
	fmt.Fprintf(w, "id\t%s\n", t.ID)
	fmt.Fprintf(w, "created\t%s\n", t.Created.Format(time.RFC3339))
	fmt.Fprintf(w, "revision\t%d\n", rev)
	fmt.Fprintf(w, "current epoch\t%d: %d partitions, %s\n", cur.Epoch, cur.Partitions, partitionerText(cur.Partitioner))
	fmt.Fprintf(w, "replication\t%s\n", replicasText(t))
	describeCompaction(w, t) // topic_compact.go
	if rc := t.Reconfig; rc != nil {
		tags := "none"
		if len(rc.PlacementTags) > 0 {
			tags = strings.Join(rc.PlacementTags, ",")
		}
		fmt.Fprintf(w, "reconfig\tto %d replica(s), placement tags %s, started %s\n", rc.Replicas, tags, rc.Started.Format(time.RFC3339))
	}
	switch {
	case t.Deleting:
		fmt.Fprintf(w, "state\tbeing deleted\n")
	case t.Creating:
		fmt.Fprintf(w, "state\tbeing created\n")
	}
	if ch := t.Change; ch != nil {
		old := t.Current().Partitions
		fenced := 0
		if ch.State == "fenced" {
			fenced = old // recorded for every old partition at once (a descriptor of an older broker may have a list)
		}
		fmt.Fprintf(w, "change\tto epoch %d, state %s (%d of %d old partitions fenced), started %s: %d partitions, %s\n",
			ch.To, ch.State, fenced, old, ch.Started.Format(time.RFC3339), ch.Partitions, partitionerText(ch.Partition))
	} else {
		fmt.Fprintf(w, "change\tnone in progress\n")
	}
	_ = w.Flush()
	for i := range t.Epochs {
		ep := &t.Epochs[i]
		fmt.Fprintf(out, "\nepoch %d", ep.Epoch)
		if ep.Epoch == cur.Epoch {
			fmt.Fprint(out, " (current)")
		}
		fmt.Fprintf(out, ", started %s\n", ep.Started.Format(time.RFC3339))
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintf(w, "  partitioner\t%s\n", partitionerText(ep.Partitioner))
		fmt.Fprintf(w, "  partitions\t%d\n", ep.Partitions)
		if len(ep.Boundaries) > 0 {
			fmt.Fprintf(w, "  boundaries\t%s\n", boundariesText(ep.Boundaries))
		} else if ep.Epoch == cur.Epoch {
			fmt.Fprintf(w, "  boundaries\tnone yet (the epoch is open)\n")
		}
		if ep.Ancestry != nil {
			fmt.Fprintf(w, "  ancestry\t%s\n", ancestrySource(ep.Ancestry.Source))
			for _, line := range ancestryLines(ep.Ancestry, 12) {
				fmt.Fprintf(w, "  \t%s\n", line)
			}
		} else if i > 0 {
			fmt.Fprintf(w, "  ancestry\tnone recorded\n")
		}
		describeEpochBackfill(w, t, ep) // topic_compact.go
		_ = w.Flush()
	}
}

// partitionerText is "name sha256:<12 hex> [config k=v, ...]".
func partitionerText(p wire.Partitioner) string {
	d := p.Digest
	if len(d) > 12 {
		d = d[:12]
	}
	s := fmt.Sprintf("%s (sha256:%s)", p.Name, d)
	if len(p.Config) > 0 {
		if pairs, err := partitioner.DecodeConfig(p.Config); err == nil {
			s += " config " + strings.Join(pairs, ", ")
		} else {
			s += fmt.Sprintf(" config %q", p.Config)
		}
	}
	return s
}

// boundariesText lists boundaries (stream sequences, by partition) compactly: all of them up to
// 16, else the first 8 and a count.
func boundariesText(b []uint64) string {
	const show = 16
	parts := make([]string, 0, show)
	for i, v := range b {
		if len(b) <= show || i < 8 {
			parts = append(parts, strconv.FormatUint(v, 10))
		}
	}
	s := strings.Join(parts, " ")
	if len(b) > show {
		s += fmt.Sprintf(" ... (%d partitions)", len(b))
	}
	return s
}

func ancestrySource(s string) string {
	switch s {
	case "declared":
		return "declared (the plugin's own ancestry, verified by conformance)"
	case "observed":
		return "observed (both functions evaluated over the keys stored in the previous epoch)"
	case "identity":
		return "identity (same function and count)"
	case "all":
		return "all (every partition of the previous epoch)"
	case "pending":
		return "pending (the broker is computing it from the stored keys)"
	}
	return s
}

// ancestryLines prints "child <- parents" lines, at most max of them (then a count); runs of
// children with the same parents are merged ("4-7 <- 0-3").
func ancestryLines(a *wire.Ancestry, max int) []string {
	var lines []string
	n := len(a.Parents)
	for c := 0; c < n; {
		end := c + 1
		for end < n && sameRanges(a.Parents[end], a.Parents[c]) {
			end++
		}
		child := strconv.Itoa(c)
		if end-c > 1 {
			child = fmt.Sprintf("%d-%d", c, end-1)
		}
		if len(lines) == max {
			lines = append(lines, fmt.Sprintf("... (%d partitions in all)", n))
			break
		}
		lines = append(lines, child+" <- "+rangesText(a.Parents[c]))
		c = end
	}
	return lines
}

func sameRanges(a, b [][2]int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func rangesText(rs [][2]int) string {
	if len(rs) == 0 {
		return "none (no keys)"
	}
	parts := make([]string, 0, len(rs))
	for _, r := range rs {
		if r[1]-r[0] == 1 {
			parts = append(parts, strconv.Itoa(r[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]-1))
		}
	}
	if len(parts) > 8 {
		parts = append(parts[:8], fmt.Sprintf("... (%d ranges)", len(rs)))
	}
	return strings.Join(parts, ", ")
}

func cmdTopicList(e *env, args []string) int {
	const cmd = "topic list"
	fs := newFlags(e, cmd, "topic list [--json]", "Lists the topics with their current epoch, partition count and partitioner.\n"+connHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, cmd, "takes no arguments")
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	ts, err := c.Topics(e.ctx)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if ts == nil {
		ts = []wire.TopicSummary{}
	}
	if *asJSON {
		return writeJSON(e, cmd, ts)
	}
	if len(ts) == 0 {
		fmt.Fprintln(e.stderr, "no topics; create one with 'pctl topic create TOPIC --partitions N --partitioner NAME'")
		return exitOK
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tEPOCH\tPARTITIONS\tPARTITIONER\tCHANGING")
	for _, s := range ts {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", s.Name, s.Epoch, s.Partitions, s.Partitioner, yesNo(s.Changing))
	}
	_ = w.Flush()
	return exitOK
}

func cmdTopicDelete(e *env, args []string) int {
	const cmd = "topic delete"
	fs := newFlags(e, cmd, "topic delete TOPIC", "Deletes a topic, its partition streams (every record) and its consumer groups' positions. Needs the admin role.\n"+connHelp)
	cf := addConnFlags(fs)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	if err := c.DeleteTopic(e.ctx, name); err != nil {
		return exitFor(e, cmd, err)
	}
	fmt.Fprintf(e.stdout, "deleted topic %s\n", name)
	return exitOK
}

const repartitionHelp = `
Starts a new epoch of a topic and waits until it is active (however long that takes, as long as
it moves: a change on thousands of partitions is followed to its end through the descriptor and
the broker's progress events; on a terminal, standard error shows its step and how many
partitions it has done; --stall gives up when nothing moved for that long, --timeout after that
long in all; SIGINT stops the waiting, not the change): a new partition count, a new
partitioner (built-in name or plugin digest), or a new config, in any combination. Per-key order
holds across the change: producers are fenced from the old epoch and re-send under the new one,
and consumers deliver a moved key's new records only after its old partition is drained.
--config replaces the config (give it again with the new partitioner if that one needs one);
--clear-config removes it. Needs the admin role.
`

func cmdTopicRepartition(e *env, args []string) int {
	const cmd = "topic repartition"
	fs := newFlags(e, cmd, "topic repartition TOPIC [--partitions M] [--partitioner NAME|DIGEST] [--config K=V ... | --clear-config] [--json] [--timeout D] [--stall D]", repartitionHelp+connHelp)
	cf := addConnFlags(fs)
	partitions := fs.String("partitions", "", "new partition count (default: unchanged)")
	plugin := fs.String("partitioner", "", "new partitioner: built-in name, uploaded plugin's name or digest (default: unchanged)")
	var config multiFlag
	fs.Var(&config, "config", "new partitioner config `K=V` (repeatable)")
	clear := fs.Bool("clear-config", false, "remove the partitioner config")
	asJSON := fs.Bool("json", false, "print the new descriptor as JSON")
	wait := addWaitFlags(fs)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	req := wire.RepartitionRequest{Topic: name}
	if *partitions != "" {
		if req.Partitions, st = parseCount(e, cmd, *partitions); st >= 0 {
			return st
		}
		if req.Partitions < 1 {
			return usageErr(e, cmd, "--partitions %d: a topic has at least 1 partition", req.Partitions)
		}
	}
	if len(config) > 0 && *clear {
		return usageErr(e, cmd, "--config and --clear-config exclude each other")
	}
	if len(config) > 0 || *clear {
		cfg, err := partitioner.EncodeConfig(config)
		if err != nil {
			return usageErr(e, cmd, "--config: %v", err)
		}
		req.Config, req.SetConfig = cfg, true
	}
	if req.Partitions == 0 && *plugin == "" && !req.SetConfig {
		return usageErr(e, cmd, "nothing to change: give --partitions, --partitioner or --config")
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	if *plugin != "" {
		ref, err := resolvePluginRef(e.ctx, c, *plugin)
		if err != nil {
			return exitFor(e, cmd, err)
		}
		req.Partitioner = ref
	}
	return repartition(e, cmd, c, req, *asJSON, wait)
}

func repartition(e *env, cmd string, c *client.Client, req wire.RepartitionRequest, asJSON bool, wait waitFlags) int {
	before, _, err := c.Topic(e.ctx, req.Topic)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	start := time.Now()
	t, err := repartitionFollowed(e, cmd, c, req, before, wait) // follow.go: to its end, with progress
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if asJSON {
		return writeJSON(e, cmd, t)
	}
	old, cur := before.Current(), t.Current()
	parts := fmt.Sprintf("%d -> %d partitions", old.Partitions, cur.Partitions)
	if old.Partitions == cur.Partitions {
		parts = fmt.Sprintf("%d partitions (unchanged)", cur.Partitions)
	}
	fn := partitionerText(old.Partitioner) + " -> " + partitionerText(cur.Partitioner)
	if a, b := partitionerText(old.Partitioner), partitionerText(cur.Partitioner); a == b {
		fn = a + " (unchanged)"
	}
	fmt.Fprintf(e.stdout, "topic %s: epoch %d active after %v: %s, %s\n", t.Name, cur.Epoch, time.Since(start).Round(time.Millisecond), parts, fn)
	if prev := t.Epoch(cur.Epoch - 1); prev != nil && len(prev.Boundaries) > 0 {
		fmt.Fprintf(e.stdout, "epoch %d boundaries: %s\n", prev.Epoch, boundariesText(prev.Boundaries))
	}
	if cur.Ancestry != nil {
		fmt.Fprintf(e.stdout, "ancestry: %s\n", ancestrySource(cur.Ancestry.Source))
	}
	return exitOK
}

func cmdTopicExpand(e *env, args []string) int {
	const cmd = "topic expand"
	fs := newFlags(e, cmd, "topic expand TOPIC --partitions M [--json] [--timeout D] [--stall D]", `
Grows a topic to M partitions (more than it has now), keeping its partitioner and config: a
repartition (see 'pctl topic repartition --help') that can only grow.
`+connHelp)
	cf := addConnFlags(fs)
	partitions := fs.String("partitions", "", "new partition count, more than the current one (required)")
	asJSON := fs.Bool("json", false, "print the new descriptor as JSON")
	wait := addWaitFlags(fs)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	if *partitions == "" {
		return usageErr(e, cmd, "--partitions M is required")
	}
	m, st := parseCount(e, cmd, *partitions)
	if st >= 0 {
		return st
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	t, _, err := c.Topic(e.ctx, name)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if n := t.Current().Partitions; m <= n {
		return usageErr(e, cmd, "--partitions %d: topic %s has %d partitions; expand only grows (use 'pctl topic repartition' to shrink)", m, name, n)
	}
	return repartition(e, cmd, c, wire.RepartitionRequest{Topic: name, Partitions: m}, *asJSON, wait)
}

func cmdTopicGroups(e *env, args []string) int {
	const cmd = "topic groups"
	fs := newFlags(e, cmd, "topic groups TOPIC [--json] | topic groups TOPIC --group GROUP --reset earliest|latest|TIME [--json]", `
Shows a topic's consumer groups: live members, and for each partition stream the group's committed
position (every record up to it is drained), the stream's last sequence and the lag between them,
and the group's assignor (spec/protocol.md §6.1). For a group with the sticky assignor it also
shows the last recorded assignments, each with the fraction of keys that changed member and what
the default modulo assignor would have moved. Members warming up before they join (standbys,
spec/protocol.md §6.10) are listed in queue order, each warming (with what it has left to read)
or queued for a slot; a standby that crashed drops off within its session timeout.

With --reset, moves consumer group GROUP as a whole (spec/protocol.md §6.6) instead: to earliest
(every record of every epoch is delivered again), latest (only records that come next), or a
time, RFC 3339 (2026-11-30T07:00:00Z) or a duration ago (10m): the first records stored at or
after it in each partition stream. Running members follow within a heartbeat (they stop, forget
what they knew of drained epochs, and go on from there: records of one key still come in order);
members that start later go on from there too. A group that does not exist is created. Needs the
consumer or admin role. It prints the group's new generation and positions.
`+connHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	group := fs.String("group", "", "with --reset: the consumer `GROUP` to move")
	reset := fs.String("reset", "", "move --group to earliest, latest or a `TIME` (RFC 3339, or a duration ago such as 10m)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	name, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	var target client.SeekTarget
	switch {
	case *reset == "" && *group != "":
		return usageErr(e, cmd, "--group is only for --reset: give --reset earliest|latest|TIME, or drop --group to list the groups")
	case *reset != "" && *group == "":
		return usageErr(e, cmd, "--reset needs --group GROUP: the consumer group to move")
	case *reset != "":
		if err := wire.ValidGroup(*group); err != nil {
			return usageErr(e, cmd, "--group: %s", trimSentinel(err))
		}
		var err error
		if target, err = client.ParseSeekTarget(*reset, time.Now()); err != nil {
			return usageErr(e, cmd, "--reset %q: give earliest, latest, an RFC 3339 time (2026-11-30T07:00:00Z) or a duration ago (10m)", *reset)
		}
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	if !target.IsZero() {
		return resetGroup(e, cmd, c, name, *group, target, *asJSON)
	}
	views, err := c.GroupLags(e.ctx, name)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, views)
	}
	if len(views) == 0 {
		fmt.Fprintf(e.stdout, "topic %s has no consumer groups\n", name)
		return exitOK
	}
	for i, v := range views {
		if i > 0 {
			fmt.Fprintln(e.stdout)
		}
		members := "no live members"
		if len(v.Members) > 0 {
			members = fmt.Sprintf("%d live member(s): %s", len(v.Members), strings.Join(v.Members, ", "))
		}
		fmt.Fprintf(e.stdout, "group %s: %s; lag %d; assignor %s\n", v.Group, members, v.Lag, v.Assignor)
		for _, line := range assignmentLines(v.Assignments, 5) {
			fmt.Fprintln(e.stdout, line)
		}
		for _, line := range standbyLines(v.Standbys, time.Now()) {
			fmt.Fprintln(e.stdout, line)
		}
		w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "PARTITION\tPOSITION\tEND\tLAG\t")
		for _, p := range v.Partitions {
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\t\n", p.Partition, p.Position, p.End, p.Lag)
		}
		_ = w.Flush()
	}
	return exitOK
}

// assignmentLines describes a sticky group's last recorded assignments (at most max, newest
// last): when, for how many members and partitions, and the fraction of keys that changed member
// against what modulo would have moved (spec/protocol.md §6.2.2).
func assignmentLines(as []wire.AssignmentSummary, max int) []string {
	if len(as) > max {
		as = as[len(as)-max:]
	}
	var out []string
	for _, a := range as {
		moved := "first assignment"
		if a.Moved != nil && a.MovedModulo != nil {
			moved = fmt.Sprintf("keys that changed member %.1f%% (modulo: %.1f%%)", 100**a.Moved, 100**a.MovedModulo)
		}
		out = append(out, fmt.Sprintf("  assignment %d: epoch %d, %d member(s), %d partition(s): %s", a.Round, a.Epoch, a.Members, a.Partitions, moved))
	}
	return out
}

// standbyLines describes a group's standbys (spec/protocol.md §6.10), in queue order: warming
// ones with the lag they last reported, queued ones waiting for a slot.
func standbyLines(sb []client.Standby, now time.Time) []string {
	var out []string
	for _, s := range sb {
		state := "queued (waits for a warm-up slot, reads nothing)"
		if s.Warming {
			state = fmt.Sprintf("warming up, lag %d record(s)", s.Lag)
		}
		out = append(out, fmt.Sprintf("  standby %s: %s; a standby for %s", s.Member, state, now.Sub(s.Started).Round(time.Second)))
	}
	return out
}

// resetView is what 'topic groups --reset --json' prints.
type resetView struct {
	Topic      string   `json:"topic"`
	Group      string   `json:"group"`
	To         string   `json:"to"`
	Generation uint64   `json:"generation"`
	Positions  []uint64 `json:"positions"`
}

func resetGroup(e *env, cmd string, c *client.Client, topic, group string, to client.SeekTarget, asJSON bool) int {
	res, err := c.ResetGroup(e.ctx, topic, group, to)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if asJSON {
		return writeJSON(e, cmd, resetView{Topic: topic, Group: group, To: to.String(), Generation: res.Generation, Positions: res.Positions})
	}
	fmt.Fprintf(e.stdout, "group %s of topic %s reset to %s: generation %d\n", group, topic, to, res.Generation)
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "PARTITION\tPOSITION\t")
	for q, p := range res.Positions {
		fmt.Fprintf(w, "%d\t%d\t\n", q, p)
	}
	_ = w.Flush()
	return exitOK
}

// partitionEnds returns the last sequence of every partition stream the topic ever had.
