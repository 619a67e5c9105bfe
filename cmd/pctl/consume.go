package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

func init() {
	register(command{name: "consume", summary: "consume a topic as a member of a consumer group", run: cmdConsume})
}

const consumeHelp = `
Runs one member of consumer group GROUP on TOPIC and prints the records it is given: the group's
members share the partitions, and records with the same key come in the order they were
produced, across epoch changes. What is printed is acknowledged (committed every 200ms and on
exit), so the next member of the group goes on from there.

--format text (default) prints one line per record, tab-separated:

  partition  epoch  seq  key  value

where seq is the record's sequence in its partition stream, and key and value are printed as
they are when they are UTF-8 without control characters; otherwise as "hex:" and their bytes in
hex (so is a key or value that itself starts with "hex:"). A keyless record's key is "-" (a key
that is "-" is printed as hex:2d); the empty key is an empty field.

--format jsonl prints one JSON object per line, these fields in this order:

  topic, partition, epoch  where the record is
  seq                      its sequence in its partition stream
  key, value               as UTF-8 strings; one that is not valid UTF-8 is given as "key_b64" or
                           "value_b64" (standard base64) instead; a keyless record has no key
  producer, pseq           the producer's id and the record's number in that producer's send
                           order (its Pctl-Producer and Pctl-Seq headers; absent when the record
                           has none): what 'pctl verify' matches against the producers' logs
  ts                       with --timestamps: when it was delivered, unix nanoseconds
  misplaced, expected_partition, misplaced_reason   with --misplaced deliver (below)
  tombstone                true on a tombstone: it deletes its key (its value is not a value)
  backfill                 on a backfilled copy: "<epoch>/<partition>/<seq>" of the record it
                           copies (spec/protocol.md §10.4)
  headers, time, stored    with --headers (below)

--misplaced says what to do with a record stored in a partition its key does not map to under
its epoch's partitioner (or whose key header cannot be decoded): only a producer that bypasses
the partitioner stores one (spec/protocol.md §6.8). stop (default): exit 1 before the record,
naming it; deliver: print it, flagged (jsonl: "misplaced": true, "expected_partition" (absent
when the key or epoch is unusable) and "misplaced_reason"; text: a sixth field
"misplaced:<expected partition or ->"), in its stream's order, no order promised for its key;
skip: do not print it, go past it. Every misplaced record is also reported on standard error.
In the text format a tombstone (it deletes its key) has an empty value and a further field
"tombstone"; a backfilled copy a further field "backfill:<epoch>/<partition>/<seq>".

--headers (jsonl) adds the record's application headers, "headers": {"name": ["value", ...]}
(absent when it has none), its timestamp "time" (unix milliseconds: the producer's time when it
gave one, else when the record was stored) and "stored" (when it was stored, unix milliseconds).

--from-beginning starts a group that does not exist yet at the first record of every partition
(default: after the records present when the group is created). An existing group always goes on
from its committed positions. --from now|beginning|current-epoch says it in full: current-epoch
reads only the current epoch's partitions (spec/protocol.md §10.5): on a topic that backfills,
once the backfill has ended, that is every key's latest record; it is the default for a new group
on a compacted topic when no backfill runs.

--reset-to moves the whole group before this member joins it (spec/protocol.md §6.6): earliest
(every record of every epoch again), latest (only what comes next), or a time, RFC 3339
(2026-11-30T07:00:00Z) or a duration ago (10m): the first records stored at or after it. Every
member of the group, running or not, goes on from there; records of one key still come in order.
The same as 'pctl topic groups TOPIC --group GROUP --reset ...' followed by this command.

It runs until interrupted (SIGINT/SIGTERM: it commits and leaves the group; exit 0), --max N
records were printed (exit 0), or --idle-exit D passed without a new record (exit 0; counted from
the member's first partitions, or from the start plus 30s for a member given none; and once every
record stored in its partitions so far was handled, waiting up to 30s more for a partition whose
reader is still opening or catching up). Needs the
consumer or admin role. Exit 2: bad flags, unknown topic, bad group name; exit 1: refused, broker
unreachable or failed.
` + connHelp

func cmdConsume(e *env, args []string) int {
	const cmd = "consume"
	fs := newFlags(e, cmd, "consume TOPIC --group GROUP [--format text|jsonl] [--headers] [--from-beginning | --from now|beginning|current-epoch] [--reset-to earliest|latest|TIME] [--max N] [--idle-exit DURATION] [--misplaced stop|deliver|skip]", consumeHelp)
	cf := addConnFlags(fs)
	group := fs.String("group", "", "consumer group `NAME` (required)")
	format := fs.String("format", "text", "output `FORMAT`: text or jsonl")
	fromBeginning := fs.Bool("from-beginning", false, "a new group starts at the first record of every partition")
	from := fs.String("from", "", "where a new group starts: now, beginning or current-epoch (default: now; current-epoch on a compacted topic)")
	maxN := fs.Int("max", 0, "exit after `N` records (0: no limit)")
	idle := fs.Duration("idle-exit", 0, "exit after `DURATION` without a new record (0: never)")
	member := fs.String("member", "", "member `ID` in the group (default: random)")
	stamps := fs.Bool("timestamps", false, "jsonl: add \"ts\", the delivery time in unix nanoseconds (lets 'pctl verify' order several members' outputs)")
	heartbeat := fs.Duration("heartbeat", time.Second, "how often the member announces itself and rebalances; stopping takes up to this `DURATION`")
	assignor := fs.String("assignor", "", "a new group's `ASSIGNOR`: modulo (default) or sticky (keeps keys on their member, spec/protocol.md §6.2.1); an existing group keeps its own")
	misplaced := fs.String("misplaced", "stop", "what to do with a record outside its key's partition: stop, deliver (flagged) or `skip`")
	headers := fs.Bool("headers", false, "jsonl: add the record's application headers, \"headers\", and its timestamps, \"time\" and \"stored\" (unix milliseconds)")
	resetTo := fs.String("reset-to", "", "move the whole group first: earliest, latest, or a `TIME` (RFC 3339, or a duration ago such as 10m)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	topic, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	switch {
	case *group == "":
		return usageErr(e, cmd, "--group is required: the consumer group this member joins")
	case *format != "text" && *format != "jsonl":
		return usageErr(e, cmd, "--format %q: text or jsonl", *format)
	case *maxN < 0:
		return usageErr(e, cmd, "--max %d: give a positive count, or 0 for no limit", *maxN)
	case *heartbeat <= 0:
		return usageErr(e, cmd, "--heartbeat %v: give a positive duration", *heartbeat)
	case *idle < 0:
		return usageErr(e, cmd, "--idle-exit %v: give a positive duration such as 5s", *idle)
	case *headers && *format != "jsonl":
		return usageErr(e, cmd, "--headers needs --format jsonl (the text format has no room for them)")
	}
	var startAt client.Start
	if *from != "" {
		var err error
		if startAt, err = client.ParseStart(*from); err != nil || startAt == client.StartDefault {
			return usageErr(e, cmd, "--from %q: give now, beginning or current-epoch", *from)
		}
		if *fromBeginning {
			return usageErr(e, cmd, "--from-beginning and --from exclude each other (--from-beginning is --from beginning)")
		}
	}
	var target client.SeekTarget
	if *resetTo != "" {
		var err error
		if target, err = client.ParseSeekTarget(*resetTo, time.Now()); err != nil {
			return usageErr(e, cmd, "--reset-to %q: give earliest, latest, an RFC 3339 time (2026-11-30T07:00:00Z) or a duration ago (10m)", *resetTo)
		}
	}
	policy, err := client.ParseMisplacedPolicy(*misplaced)
	if err != nil {
		return usageErr(e, cmd, "--misplaced %q: give stop, deliver or skip", *misplaced)
	}
	if err := wire.ValidGroup(*group); err != nil {
		return usageErr(e, cmd, "--group: %s", trimSentinel(err))
	}
	if *member != "" {
		if err := wire.ValidName("member id", *member); err != nil {
			return usageErr(e, cmd, "--member: %s", trimSentinel(err))
		}
	}
	rt, err := cmdRuntime(e)
	if err != nil {
		return failErr(e, cmd, err)
	}
	defer rt.Close(context.Background())
	c, st := cf.connect(e, cmd, rt)
	if st >= 0 {
		return st
	}
	defer c.Close()
	// The member's first rebalance must finish before --max stops it: a stop while it is still
	// taking partitions can leave one leased to this member after it is gone (see
	// TestConsumerStopDuringRebalanceReleasesLeases), and the group's next member would wait for
	// the lease to expire.
	settled := make(chan struct{})
	var once sync.Once
	onAssigned := func([]int) { once.Do(func() { close(settled) }) }
	var misplacedMu sync.Mutex
	onMisplaced := func(m *client.Message) {
		misplacedMu.Lock()
		defer misplacedMu.Unlock()
		fmt.Fprintf(e.stderr, "pctl %s: misplaced record: partition %d seq %d epoch %d key %s: %s (--misplaced %s)\n", cmd, m.Partition, m.Seq, m.Epoch,
			appendTextField(nil, m.Key), m.Misplaced.Reason, policy)
	}
	watch := newConsumeWatch(e) // progress on a terminal (consume_watch.go)
	defer watch.finish()
	cn, err := c.NewConsumer(e.ctx, topic, client.ConsumerOptions{Group: *group, Member: *member, FromBeginning: *fromBeginning, Start: startAt,
		Assignor: *assignor, Heartbeat: *heartbeat, OnAssigned: onAssigned, Misplaced: policy, OnMisplaced: onMisplaced, Hooks: []client.Hook{watch}})
	if err != nil {
		return exitFor(e, cmd, err)
	}

	if !target.IsZero() {
		res, err := cn.Seek(e.ctx, target)
		if err != nil {
			return exitFor(e, cmd, err)
		}
		fmt.Fprintf(e.stderr, "pctl %s: group %s reset to %s: generation %d\n", cmd, *group, target, res.Generation)
	}

	ctx, cancel := context.WithCancelCause(e.ctx)
	defer cancel(nil)
	onViolation(c, func(subject string) {
		cancel(fmt.Errorf("%w: these credentials may not use %s: consuming needs the consumer or admin role (consumer.nk), or a consumer credential for this topic and group (pctl creds issue)", wire.ErrPermission, subject))
	})
	out := &recordWriter{w: bufio.NewWriterSize(e.stdout, 64<<10), jsonl: *format == "jsonl", stamps: *stamps, headers: *headers, topic: topic, max: *maxN, last: time.Now()}
	errMax := errors.New("--max reached")
	errIdle := errors.New("idle")
	out.onMax = func() {
		go func() {
			select {
			case <-settled:
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
			}
			cancel(errMax)
		}()
	}
	var idleBehind *idleWhy // what the last --idle-exit check found left to handle (read after wg.Wait)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // flushes the output now and then, and watches for idleness
		defer wg.Done()
		every := 100 * time.Millisecond
		if *idle > 0 && *idle/4 < every {
			every = max(*idle/4, time.Millisecond)
		}
		t := time.NewTicker(every)
		defer t.Stop()
		joined := false
		var asked time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if !joined {
					select {
					case <-settled:
						// Idleness counts from the member's first partitions: joining a
						// loaded cluster can take seconds (CI, 2026-12-01: a README run
						// with --idle-exit 2s ended with "0 records" before it had joined).
						joined = true
						out.idleFromNow()
					default:
					}
				}
				limit := *idle
				if !joined {
					limit += idleJoinGrace // a member given no partition still exits
				}
				since := out.flushAndIdle()
				if *idle <= 0 || since < limit {
					continue
				}
				if joined && since < limit+idleJoinGrace {
					// Idle means nothing left to handle: a partition whose reader is still
					// opening or catching up (a loaded cluster: CI, 2026-12-03, a README run
					// printed alice's records and exited before bob's partition was read)
					// holds records still. Asked at most twice a second, for at most
					// idleJoinGrace more.
					if time.Since(asked) < idleAskEvery {
						continue
					}
					asked = time.Now()
					bctx, bcancel := context.WithTimeout(ctx, idleAskTimeout)
					b, err := cn.Behind(bctx)
					bcancel()
					if err != nil || len(b) > 0 {
						idleBehind = &idleWhy{parts: b, err: err}
						continue
					}
					idleBehind = nil
				}
				cancel(errIdle)
				return
			}
		}
	}()
	start := time.Now()
	runErr := cn.Run(ctx, out.handle)
	cancel(nil)
	wg.Wait()
	werr := out.close()
	watch.finish()
	n := out.count()
	why := "interrupted"
	switch context.Cause(ctx) {
	case errMax:
		why = fmt.Sprintf("--max %d reached", *maxN)
	case errIdle:
		why = fmt.Sprintf("no new record for %v", *idle)
		if idleBehind != nil {
			why += "; " + idleBehind.String()
		}
	}
	var refused error
	if cause := context.Cause(ctx); errors.Is(cause, wire.ErrPermission) {
		refused = cause
	}
	if runErr != nil || refused != nil {
		why = "failed"
	}
	mis := ""
	if st := cn.Stats(); st.Misplaced > 0 {
		mis = fmt.Sprintf(", %d misplaced (%s)", st.Misplaced, policy)
	}
	fmt.Fprintf(e.stderr, "pctl %s: %s group %s: %s in %v (%s)%s\n", cmd, topic, *group, count(n, "record"), time.Since(start).Round(time.Millisecond), why, mis)
	if refused != nil {
		return exitFor(e, cmd, refused)
	}
	if runErr != nil {
		return exitFor(e, cmd, runErr)
	}
	if werr != nil {
		return failErr(e, cmd, fmt.Errorf("write standard output: %w", werr))
	}
	return exitOK
}

// recordWriter prints records from the consumer's handlers (which run concurrently, one per
// partition) one whole line at a time.
type recordWriter struct {
	mu      sync.Mutex
	w       *bufio.Writer
	jsonl   bool
	stamps  bool
	headers bool
	topic   string
	max     int
	n       int
	last    time.Time
	err     error
	onMax   func()
	buf     []byte
}

func (r *recordWriter) handle(ctx context.Context, m *client.Message) error {
	r.mu.Lock()
	if r.err != nil || (r.max > 0 && r.n >= r.max) {
		r.mu.Unlock()
		// Not printed, so not acknowledged: wait for the member to stop; the record stays for
		// the group's next member.
		<-ctx.Done()
		return ctx.Err()
	}
	if r.jsonl {
		r.buf = appendJSONRecord(r.buf[:0], r.topic, m, r.stamps, r.headers)
	} else {
		r.buf = appendTextRecord(r.buf[:0], m)
	}
	if _, err := r.w.Write(r.buf); err != nil {
		r.err = err
		r.mu.Unlock()
		return err
	}
	r.n++
	r.last = time.Now()
	reached := r.max > 0 && r.n == r.max
	r.mu.Unlock()
	if reached {
		r.onMax()
	}
	return nil
}

// idleJoinGrace is how much longer --idle-exit waits for a member that has not yet taken a
// partition (still joining, or given none), and for one whose partitions still hold records it
// has not handled (client.Consumer.Behind).
const idleJoinGrace = 30 * time.Second

// How often and how long --idle-exit asks whether the member has handled everything stored.
const (
	idleAskEvery   = 500 * time.Millisecond
	idleAskTimeout = 5 * time.Second
)

// idleWhy is what --idle-exit's last check found: partitions still holding records the member
// has not handled, or why it could not tell.
type idleWhy struct {
	parts []int
	err   error
}

func (w *idleWhy) String() string {
	if w.err != nil {
		return fmt.Sprintf("whether every partition was read to its end is unknown (%v)", w.err)
	}
	return fmt.Sprintf("partition(s) %s still held records this member had not handled after %v more", rangeList(w.parts), idleJoinGrace)
}

// idleFromNow restarts the idle clock when no record came yet.
func (r *recordWriter) idleFromNow() {
	r.mu.Lock()
	if r.n == 0 {
		r.last = time.Now()
	}
	r.mu.Unlock()
}

// flushAndIdle flushes the output and returns the time since the last record.
func (r *recordWriter) flushAndIdle() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = r.w.Flush()
	}
	return time.Since(r.last)
}

func (r *recordWriter) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = r.w.Flush()
	}
	return r.err
}

func (r *recordWriter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func appendTextRecord(b []byte, m *client.Message) []byte {
	b = strconv.AppendInt(b, int64(m.Partition), 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(m.Epoch), 10)
	b = append(b, '\t')
	b = strconv.AppendUint(b, m.Seq, 10)
	b = append(b, '\t')
	switch {
	case m.NoKey:
		b = append(b, '-')
	case string(m.Key) == "-":
		b = append(b, "hex:2d"...)
	default:
		b = appendTextField(b, m.Key)
	}
	b = append(b, '\t')
	b = appendTextField(b, m.Value)
	if m.Misplaced != nil {
		b = append(b, "\tmisplaced:"...)
		if m.Misplaced.Expected >= 0 {
			b = strconv.AppendInt(b, int64(m.Misplaced.Expected), 10)
		} else {
			b = append(b, '-')
		}
	}
	if m.Tombstone {
		b = append(b, "\ttombstone"...)
	}
	if o := m.Backfill; o != nil {
		b = append(b, "\tbackfill:"...)
		b = append(b, wire.FormatOrigin(o.Epoch, o.Partition, o.Seq)...)
	}
	return append(b, '\n')
}

// appendTextField appends v as it is when that is unambiguous (UTF-8, no control characters, not
// starting with "hex:"), else "hex:" and its hex encoding.
func appendTextField(b, v []byte) []byte {
	if printable(v) && !(len(v) >= 4 && string(v[:4]) == "hex:") {
		return append(b, v...)
	}
	b = append(b, "hex:"...)
	return hex.AppendEncode(b, v)
}

func printable(v []byte) bool {
	for len(v) > 0 {
		r, size := utf8.DecodeRune(v)
		if (r == utf8.RuneError && size <= 1) || r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 {
			return false
		}
		v = v[size:]
	}
	return true
}

// jsonRecord is one line of --format jsonl. Pointers: absent fields are omitted, empty ones kept.
type jsonRecord struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	Epoch     int     `json:"epoch"`
	Seq       uint64  `json:"seq"`
	Key       *string `json:"key,omitempty"`
	KeyB64    *string `json:"key_b64,omitempty"`
	Value     *string `json:"value,omitempty"`
	ValueB64  *string `json:"value_b64,omitempty"`
	// Producer and PSeq identify the record (its Pctl-Producer and Pctl-Seq headers), for
	// 'pctl verify --delivered'.
	Producer string `json:"producer,omitempty"`
	PSeq     uint64 `json:"pseq,omitempty"`
	TS       int64  `json:"ts,omitempty"`
	// Misplaced marks a record outside its key's partition (--misplaced deliver):
	// ExpectedPartition is where the partitioner puts its key (absent when unusable).
	Misplaced         bool   `json:"misplaced,omitempty"`
	ExpectedPartition *int   `json:"expected_partition,omitempty"`
	MisplacedReason   string `json:"misplaced_reason,omitempty"`
	// Tombstone marks a record that deletes its key; Backfill names the record a backfilled
	// copy copies (spec/protocol.md §10).
	Tombstone bool   `json:"tombstone,omitempty"`
	Backfill  string `json:"backfill,omitempty"`
	// With --headers: the application headers and the timestamps (unix milliseconds).
	Headers map[string][]string `json:"headers,omitempty"`
	Time    *int64              `json:"time,omitempty"`
	Stored  *int64              `json:"stored,omitempty"`
}

func appendJSONRecord(b []byte, topic string, m *client.Message, stamp, headers bool) []byte {
	jr := jsonRecord{Topic: topic, Partition: m.Partition, Epoch: m.Epoch, Seq: m.Seq, Producer: m.Producer, PSeq: m.ProducerSeq}
	if headers {
		ts, st := m.Time.UnixMilli(), m.Stored.UnixMilli()
		jr.Headers, jr.Time, jr.Stored = m.Headers, &ts, &st
	}
	if stamp {
		jr.TS = time.Now().UnixNano()
	}
	if mp := m.Misplaced; mp != nil {
		jr.Misplaced, jr.MisplacedReason = true, mp.Reason
		if mp.Expected >= 0 {
			x := mp.Expected
			jr.ExpectedPartition = &x
		}
	}
	jr.Tombstone = m.Tombstone
	if o := m.Backfill; o != nil {
		jr.Backfill = wire.FormatOrigin(o.Epoch, o.Partition, o.Seq)
	}
	str := func(v []byte) (*string, *string) {
		if utf8.Valid(v) {
			s := string(v)
			return &s, nil
		}
		s := base64.StdEncoding.EncodeToString(v)
		return nil, &s
	}
	if !m.NoKey {
		jr.Key, jr.KeyB64 = str(m.Key)
	}
	jr.Value, jr.ValueB64 = str(m.Value)
	line, _ := json.Marshal(jr) // cannot fail: strings and numbers
	return append(append(b, line...), '\n')
}
