package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/runtime"
)

func init() {
	register(command{name: "produce", summary: "produce records from standard input (key<TAB>value lines)", run: cmdProduce})
}

const produceHelp = `
Reads records from standard input, one per line, and produces them to TOPIC. It exits 0 only
when every record is acknowledged by the broker (stored, and to be delivered to every consumer
group); a summary goes to standard error.

Lines: "key<TAB>value". The line's final newline is not part of the value (a carriage return
is). Everything after the first tab is the value, tabs included. A line without a tab is a
keyless record (the producer spreads keyless records over the partitions and promises no order
for them); an empty key before the tab is the empty key, which is a key like any other. With
--hex the key and the value are hex-encoded, so any bytes can be given.

--tombstones reads keys instead, one per line (the whole line is the key; hex with --hex), and
sends a tombstone for each: a record that deletes its key (spec/protocol.md §10.2; on a
compacted topic the key's value is gone at once and the tombstone after the topic's delete
retention). On a compacted topic every record needs a key: a line without a tab is refused.
--tombstone-marker M mixes both in one input, as every SDK's produce command does: a line
"key<TAB>M" sends a tombstone for key, any other line is a record as usual.

Records with the same key are stored, and delivered to every consumer group, in line order,
across epoch changes.

--broker-side sends each record to the broker's produce service, which partitions it with the
topic's module (what a thin client in any language does); by default this command partitions on
the client with the same module. With several brokers it sends to one of them at a time (the one
that answered first) and, when that broker or its NATS node fails, re-sends every record not yet
acknowledged, in order, through another (duplicates are dropped by the producer id and sequence).
--timeout DURATION bounds how long a record may go unacknowledged before it fails (default 60s).

--timeout also bounds silence: when records are outstanding and no acknowledgement has come for
that long (the broker is down, or unreachable), produce stops reading, reports what is known and
exits 1, instead of waiting. A lost connection is reported on standard error when it happens and
when it comes back. --verbose also logs the producer's decisions: retries in place (lost
acknowledgements, no responders), fences by an epoch change and the re-sends under the new epoch.
On a terminal, standard error shows the records acknowledged so far and the rate.

--producer-id ID names the producer. Records are deduplicated by (ID, the record's sequence
number in the run: 1, 2, ...) for two minutes, so running the same input again with the same ID
after a failure stores no second copy of what was already acknowledged (the summary counts as
duplicates those the broker reported as already stored; inside a batch it reports none). Do not
reuse an ID for different input within two minutes. Default: a random ID (and random
deduplication tokens: spec/protocol.md §5.1).

Errors and exit status:
  2  bad flags, or a malformed line: bad hex with --hex, or a key over 65536 bytes. Input is
     checked line by line as it is read, so records on the lines before the bad one have been
     sent: they are flushed (acknowledged, or failed) and counted in the summary, and nothing
     from the bad line on is sent. Also: unknown topic, bad topic name.
  1  a record was refused or failed (for example larger than the broker's max record size,
     1 MiB by default: each such record is reported with its line number, the others are still
     sent), a permission refusal (producing needs the producer or admin role), an unreachable
     broker, or an interrupt (SIGINT) before the end of the input.
` + connHelp

// maxLineBytes bounds one input line: more than any record can be (16 MiB max_payload, hex).
const maxLineBytes = 40 << 20

// sender is what produce needs of a producer: client.Producer (client-side partitioning) and
// client.ThinProducer (the broker's produce service) both are.
type sender interface {
	ID() string
	Send(ctx context.Context, rec client.Record, done func(client.Result)) error
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// inputLine is one parsed line of input, or the error that stops reading.
type inputLine struct {
	n   int
	rec client.Record
	err error // a malformed line (usage error) or a read error (failure)
	bad bool  // err is the line's fault
}

func cmdProduce(e *env, args []string) int {
	const cmd = "produce"
	fs := newFlags(e, cmd, "produce TOPIC [--broker-side] [--timeout DURATION] [--verbose] [--hex] [--producer-id ID] [--server URL] [--creds FILE]", produceHelp)
	cf := addConnFlags(fs)
	brokerSide := fs.Bool("broker-side", false, "partition in the broker (its produce service) instead of on the client")
	hexIn := fs.Bool("hex", false, "keys and values are hex-encoded")
	id := fs.String("producer-id", "", "producer `ID` for deduplication (default: random)")
	logPath := fs.String("log", "", "write one JSON line per record's fate to `FILE` (input for 'pctl verify --sent')")
	timeout := fs.Duration("timeout", 60*time.Second, "how long a record may go unacknowledged, retries included, before it fails; and how long produce waits without any acknowledgement before it gives up")
	tombstones := fs.Bool("tombstones", false, "every line is a key (hex with --hex): send a tombstone that deletes it")
	marker := fs.String("tombstone-marker", "", "a line key<TAB>`M` sends a tombstone for key (M as given, not hex)")
	verbose := fs.Bool("verbose", false, "log retries, fences and re-sends under a new epoch on standard error")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	topic, st := topicArg(e, cmd, pos)
	if st >= 0 {
		return st
	}
	if *timeout <= 0 {
		return usageErr(e, cmd, "--timeout %v: give a positive duration such as 60s", *timeout)
	}
	if *tombstones && *marker != "" {
		return usageErr(e, cmd, "--tombstones and --tombstone-marker exclude each other (--tombstones: every line is a key to delete)")
	}
	if *id != "" && wire.ValidGroup(*id) != nil {
		return usageErr(e, cmd, "--producer-id %q: 1 to 64 characters of A-Z a-z 0-9 _ -", *id)
	}
	var rt *runtime.Runtime
	if !*brokerSide {
		var err error
		if rt, err = cmdRuntime(e); err != nil {
			return failErr(e, cmd, err)
		}
		defer rt.Close(context.Background())
	}
	c, st := cf.connect(e, cmd, rt)
	if st >= 0 {
		return st
	}
	defer c.Close()
	// Progress, --verbose and the stall watchdog (produce_watch.go).
	w := newProduceWatch(e, cmd, *timeout, *verbose)
	defer w.finish()
	w.watchConn(c)
	var p sender
	if *brokerSide {
		tp, err := c.NewThinProducer(topic, client.ThinOptions{ID: *id, Timeout: *timeout})
		if err != nil {
			return exitFor(e, cmd, err)
		}
		// The produce service reports an unknown topic per record; ask once, up front, so that
		// a typo is one clear usage error rather than a failure per line.
		if _, _, err := c.Topic(e.ctx, topic); err != nil {
			_ = tp.Close(e.ctx)
			return exitFor(e, cmd, err)
		}
		p = tp
	} else {
		prod, err := c.NewProducer(e.ctx, topic, client.ProducerOptions{ID: *id, ContentTokens: *id != "", Logf: w.logf, Hooks: []client.Hook{w}})
		if err != nil {
			return exitFor(e, cmd, err)
		}
		p = prod
	}

	var log *sentLog
	if *logPath != "" {
		f, err := os.Create(*logPath)
		if err != nil {
			return usageErr(e, cmd, "--log: %v", err)
		}
		log = &sentLog{w: bufio.NewWriter(f), f: f, producer: p.ID()}
		defer log.close()
	}
	var tally produceTally
	start := time.Now()
	lines := make(chan inputLine, 1024)
	stop := make(chan struct{})
	defer close(stop)
	parseLine := parseRecord
	if *tombstones {
		parseLine = parseTombstone
	}
	if m := *marker; m != "" {
		parseLine = func(line []byte, hexIn bool) (client.Record, error) {
			if k, v, keyed := bytes.Cut(line, []byte{'\t'}); keyed && string(v) == m {
				return parseTombstone(k, hexIn)
			}
			return parseRecord(line, hexIn)
		}
	}
	go readRecords(e.stdin, *hexIn, parseLine, lines, stop)
	sendCtx := w.start(e.ctx) // cancelled on SIGINT or when nothing is acknowledged for --timeout

	maxPayload := c.Conn().MaxPayload()
	var stopped *inputLine // the line that stopped the input (malformed or unreadable)
	var fatal error        // a Send error that makes going on pointless
	interrupted, readAll := false, false
loop:
	for {
		var in inputLine
		var ok bool
		select {
		case <-sendCtx.Done():
			interrupted = true
			break loop
		case in, ok = <-lines:
		}
		if !ok {
			readAll = true
			break
		}
		if in.err != nil {
			stopped = &in
			break
		}
		tally.read(in.rec)
		if !*brokerSide && estimateSize(in.rec, *id) > maxPayload {
			// Checked here: the server would refuse the message before JetStream sees it.
			tally.failed(in.n, fmt.Errorf("%w: record of about %d bytes (key, value and headers) is larger than the server's max_payload of %d bytes", wire.ErrBadRequest, estimateSize(in.rec, *id), maxPayload))
			continue
		}
		n := in.n
		rec := in.rec
		w.sent()
		err := p.Send(sendCtx, rec, func(r client.Result) {
			w.answered(r)
			tally.result(n, r)
			log.write(rec, r)
		})
		if err != nil {
			w.answered(client.Result{Err: err})
			if sendCtx.Err() != nil {
				interrupted = true
				tally.failed(n, fmt.Errorf("interrupted before it was sent"))
				break
			}
			tally.failed(n, err)
			if !errors.Is(err, wire.ErrBadRequest) || errors.Is(err, client.ErrProducerClosed) {
				fatal = err
				break
			}
		}
	}

	// Every record sent gets its answer before the summary: wait up to 2 minutes, or 5 seconds
	// more after an interrupt (SIGINT while reading or while waiting here).
	flushWait := 2 * time.Minute
	if *brokerSide && *timeout+10*time.Second > flushWait {
		flushWait = *timeout + 10*time.Second // every record gets its result first
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), flushWait)
	defer cancel()
	stopGrace := context.AfterFunc(e.ctx, func() { time.AfterFunc(5*time.Second, cancel) })
	defer stopGrace()
	stopStall := context.AfterFunc(sendCtx, func() {
		if w.stalled() != nil {
			cancel() // nothing moves: do not wait the whole flush
		}
	})
	defer stopStall()
	closeErr := p.Close(flushCtx)
	if e.ctx.Err() != nil {
		interrupted = true
	}
	elapsed := time.Since(start)
	w.finish()

	tally.report(e, cmd, topic, elapsed, func() int64 { return maxRecordBytes(c, topic) })
	switch {
	case stopped != nil && stopped.bad:
		return usageErr(e, cmd, "line %d: %v; nothing from this line on was sent", stopped.n, stopped.err)
	case stopped != nil:
		return failErr(e, cmd, fmt.Errorf("line %d: %w; nothing from this line on was sent", stopped.n, stopped.err))
	case w.stalled() != nil:
		return usageFail(e, cmd, "%v", w.stalled())
	case interrupted && !readAll:
		return usageFail(e, cmd, "interrupted: standard input was not read to the end")
	case interrupted:
		return usageFail(e, cmd, "interrupted while waiting for the broker's answers")
	case tally.refused != nil:
		return exitFor(e, cmd, tally.refused)
	case fatal != nil:
		return exitFor(e, cmd, fatal)
	case tally.nFailed > 0:
		return usageFail(e, cmd, "%d of %s failed", tally.nFailed, count(tally.nRead, "record"))
	case closeErr != nil:
		return exitFor(e, cmd, closeErr)
	}
	return exitOK
}

// readRecords parses standard input into lines until EOF, a bad line or stop.
func readRecords(r io.Reader, hexIn bool, parseRecord func([]byte, bool) (client.Record, error), out chan<- inputLine, stop <-chan struct{}) {
	defer close(out)
	br := bufio.NewReaderSize(r, 1<<20)
	send := func(in inputLine) bool {
		select {
		case out <- in:
			return true
		case <-stop:
			return false
		}
	}
	for n := 1; ; n++ {
		raw, err := readLine(br)
		if errors.Is(err, errLineTooLong) {
			send(inputLine{n: n, err: fmt.Errorf("longer than %d bytes; no record is that large", maxLineBytes), bad: true})
			return
		}
		if err != nil && err != io.EOF {
			send(inputLine{n: n, err: fmt.Errorf("read standard input: %w", err)})
			return
		}
		if len(raw) == 0 && err == io.EOF {
			return
		}
		rec, perr := parseRecord(raw, hexIn)
		if perr != nil {
			send(inputLine{n: n, err: perr, bad: true})
			return
		}
		if !send(inputLine{n: n, rec: rec}) || err == io.EOF {
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its '\n' (io.EOF with the last, unterminated one).
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxLineBytes {
			return nil, errLineTooLong
		}
		switch {
		case err == nil:
			if line == nil {
				return append([]byte(nil), chunk[:len(chunk)-1]...), nil
			}
			return append(line, chunk[:len(chunk)-1]...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = append(line, chunk...)
		default:
			return append(line, chunk...), err
		}
	}
}

// parseTombstone parses one line of --tombstones: a key (the whole line; hex with --hex).
func parseTombstone(line []byte, hexIn bool) (client.Record, error) {
	key := append([]byte{}, line...)
	if hexIn {
		var err error
		if key, err = decodeHex(line); err != nil {
			return client.Record{}, fmt.Errorf("key is not hex: %v", err)
		}
	}
	if len(key) > runtime.MaxKeyBytes {
		return client.Record{}, fmt.Errorf("key of %d bytes; keys are at most %d bytes", len(key), runtime.MaxKeyBytes)
	}
	return client.Record{Key: key, Tombstone: true}, nil
}

// parseRecord parses one line: "key<TAB>value", or a keyless "value".
func parseRecord(line []byte, hexIn bool) (client.Record, error) {
	var rec client.Record
	key, value, keyed := bytes.Cut(line, []byte{'\t'})
	if !keyed {
		key, value = nil, line
	}
	if hexIn {
		var err error
		if keyed {
			if key, err = decodeHex(key); err != nil {
				return rec, fmt.Errorf("key is not hex: %v", err)
			}
		}
		if value, err = decodeHex(value); err != nil {
			return rec, fmt.Errorf("value is not hex: %v", err)
		}
	}
	if len(key) > runtime.MaxKeyBytes {
		return rec, fmt.Errorf("key of %d bytes; keys are at most %d bytes", len(key), runtime.MaxKeyBytes)
	}
	if !keyed {
		return client.Record{Value: value, NoKey: true}, nil
	}
	if key == nil {
		key = []byte{}
	}
	return client.Record{Key: key, Value: value}, nil
}

func decodeHex(s []byte) ([]byte, error) {
	out := make([]byte, hex.DecodedLen(len(s)))
	n, err := hex.Decode(out, s)
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// estimateSize is an upper bound of a record's message size (value, key header and the
// producer's identity headers).
func estimateSize(rec client.Record, id string) int64 {
	return int64(len(rec.Value) + base64.StdEncoding.EncodedLen(len(rec.Key)) + 2*len(id) + 256)
}

// maxRecordBytes asks a partition stream for the broker's max record size (0 if unknown).
func maxRecordBytes(c *client.Client, topic string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.JetStream().Stream(ctx, wire.StreamName(topic, 0))
	if err != nil {
		return 0
	}
	return int64(s.CachedInfo().Config.MaxMsgSize)
}

// produceTally counts what happened to the records.
type produceTally struct {
	mu         sync.Mutex
	nRead      int
	nKeyless   int
	nAcked     int
	nDup       int
	nFailed    int
	partitions map[int]bool
	epochs     map[int]bool
	failures   []string // the first few, with line numbers
	oversized  bool
	refused    error // a permission refusal: reported once, not per record
	nRefused   int
}

const maxReported = 10

func (t *produceTally) read(rec client.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nRead++
	if rec.NoKey {
		t.nKeyless++
	}
}

func (t *produceTally) result(line int, r client.Result) {
	if r.Err != nil {
		t.failed(line, r.Err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.partitions == nil {
		t.partitions, t.epochs = map[int]bool{}, map[int]bool{}
	}
	t.nAcked++
	if r.Duplicate {
		t.nDup++
	}
	t.partitions[r.Partition] = true
	t.epochs[r.Epoch] = true
}

func (t *produceTally) failed(line int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nFailed++
	if errors.Is(err, wire.ErrPermission) {
		if t.refused == nil {
			t.refused = err
		}
		t.nRefused++
		return
	}
	msg := oneLine(err.Error())
	if limit, ok := wire.TooLargeLimit(err); ok { // spec/protocol.md §3: by the error, not its words
		t.oversized = true
		if limit == wire.LimitMaxMsgSize {
			msg = "refused by the broker: the record (key, value and headers) is larger than its max record size"
		} else {
			msg = oneLine(trimSentinel(err))
		}
	}
	if len(t.failures) < maxReported {
		t.failures = append(t.failures, fmt.Sprintf("line %d: %s", line, msg))
	}
}

func (t *produceTally) report(e *env, cmd, topic string, elapsed time.Duration, maxRecord func() int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.failures {
		fmt.Fprintf(e.stderr, "pctl %s: %s\n", cmd, f)
	}
	if more := t.nFailed - t.nRefused - len(t.failures); more > 0 {
		fmt.Fprintf(e.stderr, "pctl %s: ... and %d more failed\n", cmd, more)
	}
	if t.oversized {
		if m := maxRecord(); m > 0 {
			fmt.Fprintf(e.stderr, "pctl %s: the broker's max record size is %d bytes (key, value and headers together; 'pctl serve --max-record-bytes')\n", cmd, m)
		}
	}
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(t.nAcked) / s
	}
	dup := ""
	if t.nDup > 0 {
		dup = fmt.Sprintf(" (%d already stored: duplicates)", t.nDup)
	}
	unknown := ""
	if n := t.nRead - t.nAcked - t.nFailed; n > 0 {
		unknown = fmt.Sprintf(", %d without an answer (they may or may not be stored)", n)
	}
	fmt.Fprintf(e.stderr, "pctl %s: %s: %s, %d acknowledged%s, %d failed%s, %d keyless; partitions used %s; epochs %s; %v, %.0f records/s\n",
		cmd, topic, count(t.nRead, "record"), t.nAcked, dup, t.nFailed, unknown, t.nKeyless, intSet(t.partitions), intSet(t.epochs), elapsed.Round(time.Millisecond), rate)
}

// intSet prints a set of ints compactly: "0-3, 7 (5)"; "none" when empty.
func intSet(m map[int]bool) string {
	if len(m) == 0 {
		return "none"
	}
	xs := make([]int, 0, len(m))
	for x := range m {
		xs = append(xs, x)
	}
	sort.Ints(xs)
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(xs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		}
		i = j + 1
	}
	s := strings.Join(parts, ", ")
	if len(xs) > 1 {
		s += fmt.Sprintf(" (%d)", len(xs))
	}
	return s
}

// sentLog writes --log: what 'pctl verify --sent' reads (verify.Sent, plus where the record went).
type sentLog struct {
	mu       sync.Mutex
	w        *bufio.Writer
	f        *os.File
	producer string
}

func (l *sentLog) write(rec client.Record, r client.Result) {
	if l == nil {
		return
	}
	line := map[string]any{"producer": l.producer, "pseq": r.ProducerSeq, "acked": r.Err == nil}
	if rec.NoKey {
		line["nokey"] = true
	} else {
		line["key"] = rec.Key // JSON base64, as verify.Sent reads it
	}
	if r.Err == nil {
		line["partition"], line["epoch"], line["seq"] = r.Partition, r.Epoch, r.Seq
	} else {
		line["error"] = r.Err.Error()
	}
	b, _ := json.Marshal(line)
	l.mu.Lock()
	l.w.Write(append(b, '\n'))
	l.mu.Unlock()
}

func (l *sentLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
	l.f.Close()
}
