package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// Descriptor reads that decide something (an epoch change's next step, "is a change in
// progress?", "does the topic exist?", the descriptor a producer refreshes after a fence) must
// see at least what this broker last wrote. A KV get does not promise that on a cluster: the
// bucket allows direct gets, which any replica answers, and a follower that has not yet applied
// the last write answers with the revision before it (found by TestClusterRepartitionCompletes: a
// repartition answered in 1 ms with the previous epoch and left "planned" behind). So the broker
// reads descriptors from the bucket stream's leader ($JS.API.STREAM.MSG.GET, which only the
// leader answers) and checks the revision read against the highest revision of that key this
// broker has written or read (its floor): a lower one is stale (a leader that has not applied
// the whole log yet, just after an election) and is read again, with a short backoff, until it
// is current or staleReadLimit has passed. RATIONALE.md, "Why read descriptors from the stream
// leader?".

// opTimeout bounds one JetStream API call of the broker (a request's own deadline is minutes
// long): a call that a cluster does not answer (a node down, an election) fails after it, so that
// the step that made it fails, releases the topic's lock, and is retried.
const opTimeout = 5 * time.Second

func opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// staleReadLimit bounds how long a read waits for the leader to catch up with this broker's own
// last write before it fails with wire.ErrUnavailable.
const staleReadLimit = 10 * time.Second

// descriptorFloors remembers, per topic, the highest descriptor revision this broker wrote or read.
type descriptorFloors struct {
	mu  sync.Mutex
	rev map[string]uint64
}

func (f *descriptorFloors) get(name string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev[name]
}

func (f *descriptorFloors) raise(name string, rev uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rev == nil {
		f.rev = map[string]uint64{}
	}
	if rev > f.rev[name] {
		f.rev[name] = rev
	}
}

// kvEntry is a key's latest message in the descriptor bucket, read from the stream leader.
type kvEntry struct {
	value   []byte
	rev     uint64
	deleted bool        // a delete or purge marker
	hdr     nats.Header // the message's headers, if any
}

// leaderGet reads the latest entry of a key of the topics bucket from its stream's leader.
// errKeyMissing: the key has no entry at all.
func (b *Broker) leaderGet(ctx context.Context, key string) (kvEntry, error) {
	return b.leaderLast(ctx, "KV_"+wire.TopicsBucket, "$KV."+wire.TopicsBucket+"."+key)
}

// leaderLast reads the last message of a subject in a stream from the stream's leader
// ($JS.API.STREAM.MSG.GET, which followers do not answer). errKeyMissing: there is none.
func (b *Broker) leaderLast(ctx context.Context, stream, subject string) (kvEntry, error) {
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	ctx, cancel := context.WithTimeout(ctx, leaderReadTimeout)
	defer cancel()
	m, err := b.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return kvEntry{}, fmt.Errorf("%w: the leader of stream %s did not answer (%v): is a JetStream node down, or an election in progress?", errNoLeader, stream, err)
		}
		return kvEntry{}, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Hdrs    []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return kvEntry{}, fmt.Errorf("bad answer from stream %s: %v", stream, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound) {
			return kvEntry{}, errKeyMissing
		}
		if resp.Error.ErrCode == 10008 { // JetStream (cluster) temporarily unavailable
			return kvEntry{}, fmt.Errorf("%w: stream %s: %s", errNoLeader, stream, resp.Error.Description)
		}
		return kvEntry{}, fmt.Errorf("stream %s: %s (error %d)", stream, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return kvEntry{}, fmt.Errorf("stream %s answered without a message", stream)
	}
	e := kvEntry{value: resp.Message.Data, rev: resp.Message.Seq}
	if len(resp.Message.Hdrs) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Hdrs)
		if err == nil {
			e.hdr = h
			switch h.Get("KV-Operation") {
			case "DEL", "PURGE":
				e.deleted = true
			}
			if r := h.Get(jetstream.MarkerReasonHeader); r != "" {
				e.deleted = true
			}
		}
	}
	return e, nil
}

var (
	errKeyMissing = errors.New("no such key")
	errNoLeader   = errors.New("no stream leader answers")
)

// leaderReadTimeout bounds a read from a stream's leader; after it (an election in progress) the
// read falls back to any replica, still checked against the floor.
const leaderReadTimeout = 3 * time.Second

// directGet reads a descriptor from whichever replica answers (a KV get): fresh enough for this
// broker when its revision is at least the floor, which getTopic checks.
func (b *Broker) directGet(ctx context.Context, key string) (kvEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderReadTimeout)
	defer cancel()
	e, err := b.topic.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return kvEntry{}, errKeyMissing
	case err != nil:
		return kvEntry{}, err
	}
	return kvEntry{value: e.Value(), rev: e.Revision(), deleted: e.Operation() != jetstream.KeyValuePut}, nil
}

// getTopic reads a descriptor as described above: from the bucket's leader, at least at this
// broker's floor for the topic.
func (b *Broker) getTopic(ctx context.Context, name string) (*wire.Topic, uint64, error) {
	if err := wire.ValidTopic(name); err != nil {
		return nil, 0, err
	}
	deadline := time.Now().Add(staleReadLimit)
	pause := 5 * time.Millisecond
	for {
		e, err := b.leaderGet(ctx, name)
		if errors.Is(err, errNoLeader) {
			// No leader for the moment: any replica will do if it has what this broker wrote.
			e, err = b.directGet(ctx, name)
		}
		floor := b.floors.get(name)
		switch {
		case err != nil && !errors.Is(err, errKeyMissing):
			return nil, 0, fmt.Errorf("%w: read topic %s: %v", wire.ErrUnavailable, name, err)
		case err == nil && e.rev >= floor:
			b.floors.raise(name, e.rev)
			if e.deleted {
				return nil, e.rev, topicNotFound(name)
			}
			var t wire.Topic
			if err := json.Unmarshal(e.value, &t); err != nil {
				return nil, 0, fmt.Errorf("%w: descriptor of %s is corrupt: %v", wire.ErrInternal, name, err)
			}
			return &t, e.rev, nil
		case err != nil && floor == 0:
			return nil, 0, topicNotFound(name)
		}
		// Stale: older than what this broker wrote or read (or missing although it wrote it).
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("%w: read topic %s: the bucket's leader still answers revision %d, older than revision %d this broker wrote; is the cluster electing a new leader? retry", wire.ErrUnavailable, name, e.rev, floor)
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("%w: read topic %s: %v", wire.ErrUnavailable, name, ctx.Err())
		case <-time.After(pause):
		}
		if pause < 200*time.Millisecond {
			pause *= 2
		}
	}
}

func topicNotFound(name string) error {
	return fmt.Errorf("%w: topic %q does not exist; create it with 'pctl topic create %s --partitions N --partitioner NAME'", wire.ErrNotFound, name, name)
}

// putTopic replaces a descriptor by compare-and-set on rev; a concurrent change makes it fail
// with ErrConflict.
func (b *Broker) putTopic(ctx context.Context, t *wire.Topic, rev uint64) (uint64, error) {
	nrev, err := b.putTopicQuiet(ctx, t, rev)
	if err == nil {
		b.announce(t.Name)
	}
	return nrev, err
}

// putTopicQuiet is putTopic without the event: for writes that concern no producer or consumer
// (a backfill's progress, spec/protocol.md §10.3).
func (b *Broker) putTopicQuiet(ctx context.Context, t *wire.Topic, rev uint64) (uint64, error) {
	body, err := json.Marshal(t)
	if err != nil {
		return 0, err
	}
	ctx, cancel := opContext(ctx)
	defer cancel()
	nrev, err := b.topic.Update(ctx, t.Name, body, rev)
	if err != nil {
		if isWrongLastSequence(err) {
			return 0, fmt.Errorf("%w: topic %s changed concurrently (revision %d is no longer current)", wire.ErrConflict, t.Name, rev)
		}
		return 0, fmt.Errorf("%w: write topic %s: %v", wire.ErrUnavailable, t.Name, err)
	}
	b.floors.raise(t.Name, nrev)
	return nrev, nil
}

// writeUnanswered tells a write to a stream that nobody answered (no stream leader reachable:
// "no response from stream", nothing stored) or that timed out (perhaps stored, its answer lost)
// from one the stream refused.
func writeUnanswered(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// createTopicKey writes a new descriptor; it fails with jetstream.ErrKeyExists when the name is
// taken by another topic.
//
// A write the topics bucket did not answer is tried again until giveUp: on a cluster that has
// just started, or is electing the bucket's leader, the first writes answer "no response from
// stream" (nobody stored it) or time out (perhaps stored, its answer lost). After a timeout the
// name may be taken by this very descriptor: a retry that finds the key taken reads it, and the
// same topic ID (a fresh NUID per request) means the earlier try was stored; a descriptor that
// cannot be read yet is read again (and the key tried again) until giveUp.
func (b *Broker) createTopicKey(ctx context.Context, t *wire.Topic, giveUp time.Time) (uint64, error) {
	body, err := json.Marshal(t)
	if err != nil {
		return 0, err
	}
	ambiguous := false // an earlier try timed out: it may have been stored
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		octx, cancel := opContext(ctx)
		rev, err := b.topic.Create(octx, t.Name, body)
		cancel()
		if err == nil {
			b.floors.raise(t.Name, rev)
			return rev, nil
		}
		retry := writeUnanswered(err)
		if errors.Is(err, jetstream.ErrKeyExists) {
			if !ambiguous {
				return 0, err
			}
			// The stream's leader may hold the timed-out try, stored or still proposed (a
			// leader without quorum refuses a second create of the key it has in flight): only
			// the descriptor read says whose the key is. Unreadable now, or not there (the
			// proposal dropped): try again.
			cur, crev, gerr := b.getTopic(ctx, t.Name)
			switch {
			case gerr == nil && cur.ID == t.ID:
				return crev, nil
			case gerr == nil:
				return 0, err // another request's topic
			}
			retry = true
			err = fmt.Errorf("a try to create topic %s timed out and its key is taken, but no descriptor can be read under it yet (%v): whether the topic was created is unknown; look with 'pctl topic get %s' before asking again", t.Name, gerr, t.Name)
		}
		if !retry || ctx.Err() != nil || time.Now().Add(pause).After(giveUp) {
			return 0, err
		}
		ambiguous = ambiguous || !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders)
		b.cfg.Logger.Warn("topic creation: the topics bucket did not answer; retrying", "topic", t.Name, "error", err, "pause", pause)
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(pause):
		}
	}
}

// deleteTopicKey removes a descriptor by compare-and-set on rev, and raises the floor past the
// delete marker so that this broker never again takes the deleted descriptor for current.
func (b *Broker) deleteTopicKey(ctx context.Context, name string, rev uint64) error {
	ctx, cancel := opContext(ctx)
	defer cancel()
	if err := b.topic.Delete(ctx, name, jetstream.LastRevision(rev)); err != nil {
		if isWrongLastSequence(err) {
			return fmt.Errorf("%w: topic %s changed concurrently (revision %d is no longer current)", wire.ErrConflict, name, rev)
		}
		return fmt.Errorf("%w: delete topic %s: %v", wire.ErrUnavailable, name, err)
	}
	// The marker's revision is above rev; rev+1 is a floor that excludes the deleted one.
	b.floors.raise(name, rev+1)
	b.announce(name)
	return nil
}

// isWrongLastSequence says whether a KV write failed its compare-and-set: by JetStream's codes
// (10071; 10164 on a replicated stream) or nats.go's sentinels, never by a message's words.
func isWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// announce tells clients that a topic's descriptor changed (best effort; clients also refresh
// when a publish is fenced).
func (b *Broker) announce(topic string) {
	_ = b.nc.Publish(wire.TopicEventSubject(topic), nil)
}
