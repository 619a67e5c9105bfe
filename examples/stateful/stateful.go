// Package stateful is an example stateful processor on pctl: a per-key running total, kept in a
// local store (a map), made durable in a changelog topic, and handed over between the members of
// its consumer group with the client's state handover API (client.StateHandler,
// spec/protocol.md §6.9).
//
// Every input record's value is a decimal amount; the processor adds it to its key's total. For
// each record it applies, it writes the key's new state to the changelog (and waits for the
// acknowledgement) before the record is acknowledged, so the changelog always holds every
// applied record's effect. The state carries the input position it was last updated by (stream
// and sequence), so a record delivered again after a member crash is recognised and not counted
// twice: within one key, records come in order (spec/protocol.md §6.5), and a record is
// redelivered only from its own partition, after the ones of that partition already applied.
//
// Load reads the changelog (incrementally: an index of every key's latest state, brought up to
// date from where it last read) and installs the keys asked for; Flush only drops keys from the
// local store, since the changelog already has them. Run it with the sticky assignor and keys that
// stay on one member across an expansion are never flushed nor loaded.
package stateful

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// State is one key's state, as the changelog stores it (JSON).
type State struct {
	Total int64 `json:"total"`
	// Count is the number of input records applied; the changelog record with the highest count
	// is the key's latest state.
	Count int64 `json:"count"`
	// Partition and Seq are the input record that last changed the state (its stream and stream
	// sequence).
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
}

// Processor is one member's running totals. It implements client.StateHandler; Handle is its
// record handler. Safe for concurrent use (the consumer runs partitions in parallel).
type Processor struct {
	c         *client.Client
	changelog string
	prod      *client.Producer

	// OnApply, if set, is called after each input record is applied (not for duplicates), with
	// the key and the time: the proof measures per-key processing pauses with it.
	OnApply func(key string, at time.Time)

	mu    sync.Mutex
	store map[string]State // the local store: keys this member holds

	idxMu sync.Mutex
	index map[string]State // every key's latest changelog state, as read so far
	read  map[int]uint64   // changelog stream -> last sequence read into index
	stats Stats
}

// Stats counts what a processor did.
type Stats struct {
	Applied, Duplicates int64
	Loads, Flushes      int64
	LoadedKeys          int64
	ChangelogRead       int64 // changelog records read into the index
	LoadTime            time.Duration
}

// New returns a processor writing its changelog to topic changelog with producer p (whose topic
// must be changelog), reading it with c.
func New(c *client.Client, changelog string, p *client.Producer) *Processor {
	return &Processor{c: c, changelog: changelog, prod: p, store: map[string]State{}, index: map[string]State{}, read: map[int]uint64{}}
}

// Stats returns the processor's counters.
// It takes only the store's lock, never the index's: catching up holds that across reads of the
// changelog, and a caller asking for counters must not wait for the network.
func (p *Processor) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Handle applies one input record (a client.Handler).
func (p *Processor) Handle(ctx context.Context, m *client.Message) error {
	if m.NoKey {
		return nil
	}
	amount, err := strconv.ParseInt(string(m.Value), 10, 64)
	if err != nil {
		return fmt.Errorf("record %s/%d seq %d: value %q is not a decimal amount: %w", m.Topic, m.Partition, m.Seq, m.Value, err)
	}
	key := string(m.Key)
	p.mu.Lock()
	st := p.store[key]
	p.mu.Unlock()
	if st.Count > 0 && st.Partition == m.Partition && m.Seq <= st.Seq {
		p.mu.Lock()
		p.stats.Duplicates++
		p.mu.Unlock()
		return nil // applied before a crash, delivered again
	}
	st = State{Total: st.Total + amount, Count: st.Count + 1, Partition: m.Partition, Seq: m.Seq}
	body, _ := json.Marshal(st)
	if _, err := p.prod.Produce(ctx, client.Record{Key: m.Key, Value: body}); err != nil {
		return fmt.Errorf("changelog %s: %w", p.changelog, err)
	}
	now := time.Now()
	p.mu.Lock()
	p.store[key] = st
	p.stats.Applied++
	p.mu.Unlock()
	if p.OnApply != nil {
		p.OnApply(key, now)
	}
	return nil
}

// Load installs the changelog's latest state of the keys in ks (client.StateHandler); a key the
// changelog does not have starts from zero.
func (p *Processor) Load(ctx context.Context, ks client.KeySet) error {
	start := time.Now()
	if err := p.catchUp(ctx); err != nil {
		return err
	}
	p.idxMu.Lock()
	loaded := make(map[string]State, len(ks.Keys))
	for _, k := range ks.Keys {
		if st, ok := p.index[string(k)]; ok {
			loaded[string(k)] = st
		}
	}
	p.idxMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.LoadTime += time.Since(start)
	for _, k := range ks.Keys {
		delete(p.store, string(k))
	}
	for k, st := range loaded {
		p.store[k] = st
	}
	p.stats.Loads++
	p.stats.LoadedKeys += int64(len(ks.Keys))
	return nil
}

// Flush drops the keys in ks from the local store: the changelog already holds their state,
// written before each record was acknowledged (client.StateHandler).
func (p *Processor) Flush(ctx context.Context, ks client.KeySet) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range ks.Keys {
		delete(p.store, string(k))
	}
	p.stats.Flushes++
	return nil
}

// Totals returns the local store's totals (the keys this member holds).
func (p *Processor) Totals() map[string]State {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]State, len(p.store))
	for k, v := range p.store {
		out[k] = v
	}
	return out
}

// Warm is the processor's warm-up before it joins its group (client.WarmUp.Warm,
// spec/protocol.md §6.10): it brings its changelog index up to date without taking any key, and
// returns how many changelog records were written meanwhile (its lag). The keys' state is still
// installed by Load at the cut-over, which then reads only what changed since. (This processor
// indexes its whole changelog, whose partitions are not its input's; a processor with a
// co-partitioned changelog, client.NewCoConsumer, could read only the partitions it is given.)
func (p *Processor) Warm(ctx context.Context, partitions []int) (int64, error) {
	if err := p.catchUp(ctx); err != nil {
		return 0, err
	}
	return p.changelogLag(ctx)
}

// installIndex makes every indexed state the local store's (the control of RunWarmUp: state used
// without loading it again at the cut-over).
func (p *Processor) installIndex() {
	p.idxMu.Lock()
	defer p.idxMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, st := range p.index {
		p.store[k] = st
	}
}

// changelogLag is the number of changelog records past what the index has read.
func (p *Processor) changelogLag(ctx context.Context) (int64, error) {
	t, _, err := p.c.Topic(ctx, p.changelog)
	if err != nil {
		return 0, err
	}
	p.idxMu.Lock()
	read := make(map[int]uint64, len(p.read))
	for q, s := range p.read {
		read[q] = s
	}
	p.idxMu.Unlock()
	var lag int64
	for q := 0; q < t.MaxPartitions(); q++ {
		s, err := p.c.JetStream().Stream(ctx, wire.StreamName(p.changelog, q))
		if err != nil {
			return 0, fmt.Errorf("changelog %s partition %d: %w", p.changelog, q, err)
		}
		if last := s.CachedInfo().State.LastSeq; last > read[q] {
			lag += int64(last - read[q])
		}
	}
	return lag, nil
}

// catchUp reads every changelog stream from where the index last read to its current end.
func (p *Processor) catchUp(ctx context.Context) error {
	p.idxMu.Lock()
	defer p.idxMu.Unlock()
	_, n, err := ReadChangelog(ctx, p.c, p.changelog, p.read, p.index)
	p.mu.Lock()
	p.stats.ChangelogRead += int64(n)
	p.mu.Unlock()
	return err
}

// ReadChangelog brings index (every key's highest-count state) up to date with the changelog
// topic's streams, reading each from read[stream]+1 to its current last sequence and recording
// the new positions in read. It returns index and the number of records read. A stream it has
// not read yet is read from client.ChangelogReadStart: on a compacted changelog whose backfill
// has ended, the current epoch alone (its copies hold every key's latest state), not every older
// layout.
func ReadChangelog(ctx context.Context, c *client.Client, topic string, read map[int]uint64, index map[string]State) (map[string]State, int, error) {
	return readChangelog(ctx, c, topic, read, index, true)
}

func readChangelog(ctx context.Context, c *client.Client, topic string, read map[int]uint64, index map[string]State, currentEpoch bool) (map[string]State, int, error) {
	t, _, err := c.Topic(ctx, topic)
	if err != nil {
		return index, 0, err
	}
	js := c.JetStream()
	n := 0
	for q := 0; q < t.MaxPartitions(); q++ {
		s, err := js.Stream(ctx, wire.StreamName(topic, q))
		if err != nil {
			return index, n, fmt.Errorf("changelog %s partition %d: %w", topic, q, err)
		}
		last := s.CachedInfo().State.LastSeq
		if _, started := read[q]; !started && currentEpoch {
			// A stream not read yet: from where the latest state per key starts (§10.5).
			first, needed := client.ChangelogReadStart(t, q)
			switch {
			case !needed:
				read[q] = last
			case first > 1:
				read[q] = first - 1
			}
		}
		if last <= read[q] {
			continue
		}
		// Every Fetch of an ordered consumer after the first re-creates its server consumer, and
		// nats.go retries a failed re-creation for ever by default, inside Fetch and deaf to ctx
		// (a stream gone, a closed connection): CI once hung 17 minutes there, with Stats
		// waiting behind it. Three attempts, then Fetch fails and so does this read.
		cons, err := js.OrderedConsumer(ctx, wire.StreamName(topic, q), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"pctl.data." + topic + ".>"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: read[q] + 1,
			MaxResetAttempts: 3})
		if err != nil {
			return index, n, fmt.Errorf("changelog %s partition %d: %w", topic, q, err)
		}
		// want is how many messages the next fetch asks for: one at first, then what the last
		// message said was pending. Sequences are not a count (a compacted stream has gaps),
		// and a fetch for more than is there waits its whole 2 s.
		want := uint64(1)
		for empty := 0; read[q] < last; {
			if empty == 3 {
				return index, n, fmt.Errorf("%w: changelog %s partition %d: nothing read past sequence %d, the stream's last is %d", wire.ErrUnavailable, topic, q, read[q], last)
			}
			if want == 0 {
				read[q] = last // nothing is pending: the rest of the range holds no message
				break
			}
			// The filter matches every message of the stream (records and fence markers).
			batch, err := cons.Fetch(int(min(want, last-read[q], 1000)), jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return index, n, fmt.Errorf("changelog %s partition %d: %w", topic, q, err)
			}
			got := 0
			for m := range batch.Messages() {
				got++
				md, err := m.Metadata()
				if err != nil {
					continue
				}
				read[q] = md.Sequence.Stream
				want = md.NumPending
				kh := m.Headers().Get(wire.HeaderKey)
				if kh == "" {
					continue // a fence marker or a keyless record
				}
				key, err := wire.DecodeKey(kh)
				if err != nil {
					continue
				}
				var st State
				if json.Unmarshal(m.Data(), &st) != nil {
					continue
				}
				n++
				if cur, ok := index[string(key)]; !ok || st.Count > cur.Count {
					index[string(key)] = st
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
				return index, n, fmt.Errorf("changelog %s partition %d: %w", topic, q, err)
			}
			if got == 0 {
				if ctx.Err() != nil {
					return index, n, ctx.Err()
				}
				empty++
			}
		}
	}
	return index, n, nil
}
