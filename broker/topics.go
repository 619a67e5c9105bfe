package broker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// MaxTopicPartitions is the most partitions a topic may have.
const MaxTopicPartitions = 16384

func (b *Broker) getTopic(ctx context.Context, name string) (*wire.Topic, uint64, error) {
	if err := wire.ValidTopic(name); err != nil {
		return nil, 0, err
	}
	e, err := b.topic.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: topic %q does not exist; create it with 'pctl topic create %s --partitions N --partitioner NAME'", wire.ErrNotFound, name, name)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("%w: read topic %s: %v", wire.ErrUnavailable, name, err)
	}
	var t wire.Topic
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, 0, fmt.Errorf("%w: descriptor of %s is corrupt: %v", wire.ErrInternal, name, err)
	}
	return &t, e.Revision(), nil
}

// putTopic replaces a descriptor by compare-and-set on rev; a concurrent change makes it fail
// with ErrConflict.
func (b *Broker) putTopic(ctx context.Context, t *wire.Topic, rev uint64) (uint64, error) {
	body, err := json.Marshal(t)
	if err != nil {
		return 0, err
	}
	nrev, err := b.topic.Update(ctx, t.Name, body, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || strings.Contains(err.Error(), "wrong last sequence") {
			return 0, fmt.Errorf("%w: topic %s changed concurrently (revision %d is no longer current)", wire.ErrConflict, t.Name, rev)
		}
		return 0, fmt.Errorf("%w: write topic %s: %v", wire.ErrUnavailable, t.Name, err)
	}
	b.announce(t.Name)
	return nrev, nil
}

// announce tells clients that a topic's descriptor changed (best effort; clients also refresh
// when a publish is fenced).
func (b *Broker) announce(topic string) {
	_ = b.nc.Publish(wire.TopicEventSubject(topic), nil)
}

func (b *Broker) apiTopicGet(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.TopicRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	t, rev, err := b.getTopic(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	if t.Creating {
		return nil, fmt.Errorf("%w: topic %s is being created; retry in a moment", wire.ErrUnavailable, t.Name)
	}
	return wire.TopicReply{Topic: *t, Revision: rev}, nil
}

func (b *Broker) apiTopicList(ctx context.Context, m *nats.Msg) (any, error) {
	lister, err := b.topic.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	reply := wire.TopicListReply{Topics: []wire.TopicSummary{}}
	for k := range lister.Keys() {
		t, _, err := b.getTopic(ctx, k)
		if err != nil || t.Creating || t.Deleting {
			continue
		}
		cur := t.Current()
		reply.Topics = append(reply.Topics, wire.TopicSummary{Name: t.Name, Epoch: cur.Epoch, Partitions: cur.Partitions, Partitioner: cur.Partitioner.Name, Changing: t.Change != nil})
	}
	sort.Slice(reply.Topics, func(i, j int) bool { return reply.Topics[i].Name < reply.Topics[j].Name })
	return reply, nil
}

func (b *Broker) apiTopicCreate(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.CreateTopicRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if err := wire.ValidTopic(req.Topic); err != nil {
		return nil, err
	}
	if req.Partitions < 1 || req.Partitions > MaxTopicPartitions {
		return nil, fmt.Errorf("%w: --partitions %d: a topic has 1 to %d partitions", wire.ErrBadRequest, req.Partitions, MaxTopicPartitions)
	}
	p, err := b.resolvePartitioner(ctx, req.Partitioner, req.Config)
	if err != nil {
		return nil, err
	}
	t := &wire.Topic{Name: req.Topic, ID: nuid.Next(), Created: time.Now().UTC(), Creating: true,
		Epochs: []wire.Epoch{{Epoch: 1, Partitioner: p, Partitions: req.Partitions, Started: time.Now().UTC()}}}
	body, _ := json.Marshal(t)
	rev, err := b.topic.Create(ctx, t.Name, body)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			if old, _, gerr := b.getTopic(ctx, t.Name); gerr == nil {
				cur := old.Current()
				return nil, fmt.Errorf("%w: topic %q already exists (epoch %d, %d partitions, %s); choose another name, or 'pctl topic delete %s' first", wire.ErrExists, t.Name, cur.Epoch, cur.Partitions, cur.Partitioner.Name, t.Name)
			}
			return nil, fmt.Errorf("%w: topic %q already exists", wire.ErrExists, t.Name)
		}
		return nil, fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	if err := b.finishCreate(ctx, t, rev); err != nil {
		return nil, err
	}
	t, rev, err = b.getTopic(ctx, t.Name)
	if err != nil {
		return nil, err
	}
	return wire.TopicReply{Topic: *t, Revision: rev}, nil
}

// finishCreate creates the partition streams of a topic being created, then clears Creating.
// Idempotent: a broker that died halfway calls it again on start.
func (b *Broker) finishCreate(ctx context.Context, t *wire.Topic, rev uint64) error {
	cur := t.Current()
	err := b.forPartitions(ctx, cur.Partitions, func(q int) error {
		return b.ensureStream(ctx, t.Name, q, wire.DataSubject(t.Name, cur.Epoch, q))
	})
	if err != nil {
		return err
	}
	t.Creating = false
	_, err = b.putTopic(ctx, t, rev)
	return err
}

// forPartitions runs f for partitions 0..n-1, a few at a time.
func (b *Broker) forPartitions(ctx context.Context, n int, f func(q int) error) error {
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for q := 0; q < n; q++ {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed || ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(q int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(q); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(q)
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// ensureStream creates partition q's stream with the given subject if it does not exist. An
// existing stream is left as it is (its subject is the epoch machinery's business).
func (b *Broker) ensureStream(ctx context.Context, topic string, q int, subject string) error {
	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        wire.StreamName(topic, q),
		Description: fmt.Sprintf("pctl topic %s partition %d", topic, q),
		Subjects:    []string{subject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  2 * time.Minute,
		MaxMsgSize:  b.cfg.MaxRecordBytes,
		Replicas:    b.cfg.Replicas,
		AllowDirect: true,
		// Producers send fast batches (spec/protocol.md §5.1.1).
		AllowBatchPublish: true,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return b.allowBatches(ctx, wire.StreamName(topic, q))
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: create stream %s: %v", wire.ErrUnavailable, wire.StreamName(topic, q), err)
}

// allowBatches turns on fast batch publishing for a partition stream created by an older pctl
// (producers need it, spec/protocol.md §5.1.1). A missing stream is left alone.
func (b *Broker) allowBatches(ctx context.Context, name string) error {
	s, err := b.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: stream %s: %v", wire.ErrUnavailable, name, err)
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowBatchPublish {
		return nil
	}
	cfg.AllowBatchPublish = true
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("%w: enable fast batches on stream %s (needs nats-server 2.14+ on every node): %v", wire.ErrUnavailable, name, err)
	}
	b.cfg.Logf("stream %s: fast batch publishing enabled (created by an older pctl)", name)
	return nil
}

func (b *Broker) apiTopicDelete(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.TopicRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	t, rev, err := b.getTopic(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	if !t.Deleting {
		t.Deleting = true
		if rev, err = b.putTopic(ctx, t, rev); err != nil {
			return nil, err
		}
	}
	return struct{}{}, b.finishDelete(ctx, t, rev)
}

func (b *Broker) finishDelete(ctx context.Context, t *wire.Topic, rev uint64) error {
	err := b.forPartitions(ctx, t.MaxPartitions(), func(q int) error {
		err := b.js.DeleteStream(ctx, wire.StreamName(t.Name, q))
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w: delete stream %s: %v", wire.ErrUnavailable, wire.StreamName(t.Name, q), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if lister, err := b.group.ListKeys(ctx, jetstream.IgnoreDeletes()); err == nil {
		for k := range lister.Keys() {
			if strings.HasPrefix(k, t.ID+".") {
				_ = b.group.Purge(ctx, k)
			}
		}
	}
	if err := b.topic.Delete(ctx, t.Name, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	b.announce(t.Name)
	return nil
}

// resolvePartitioner turns a reference (built-in name or digest of an uploaded plugin) into an
// epoch's partitioner, after checking that the module accepts the config.
func (b *Broker) resolvePartitioner(ctx context.Context, ref string, config []byte) (wire.Partitioner, error) {
	if ref == "" {
		return wire.Partitioner{}, fmt.Errorf("%w: no partitioner given; name a built-in (%s) or the digest of an uploaded plugin", wire.ErrBadRequest, strings.Join(plugins.BuiltinNames(), ", "))
	}
	wasm, err := b.moduleBytes(ctx, ref)
	if err != nil {
		return wire.Partitioner{}, err
	}
	p := wire.Partitioner{Digest: runtime.Digest(wasm), Config: config}
	w, err := b.partitionerFor(ctx, p)
	if err != nil {
		return wire.Partitioner{}, err
	}
	p.Name = w.Name()
	return p, nil
}

// moduleBytes returns a module by built-in name or digest (a built-in's or an uploaded one's).
func (b *Broker) moduleBytes(ctx context.Context, ref string) ([]byte, error) {
	if wasm, ok := plugins.Builtin(ref); ok {
		return wasm, nil
	}
	d := strings.ToLower(strings.TrimPrefix(ref, "sha256:"))
	if _, err := hex.DecodeString(d); err != nil || len(d) != 64 {
		return nil, fmt.Errorf("%w: plugin %q is not a built-in (%s) nor a sha256 digest of 64 hex digits", wire.ErrNotFound, ref, strings.Join(plugins.BuiltinNames(), ", "))
	}
	for _, name := range plugins.BuiltinNames() {
		if wasm, _ := plugins.Builtin(name); runtime.Digest(wasm) == d {
			return wasm, nil
		}
	}
	wasm, err := b.objs.GetBytes(ctx, d)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: no plugin with digest sha256:%s; upload it with 'pctl plugin upload FILE.wasm'", wire.ErrNotFound, d)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: read plugin %s: %v", wire.ErrUnavailable, d, err)
	}
	if runtime.Digest(wasm) != d {
		return nil, fmt.Errorf("%w: stored plugin %s does not match its digest", wire.ErrInternal, d)
	}
	return wasm, nil
}

// partitionerFor returns a pooled partitioner for an epoch's (digest, config), shared by the
// produce service and ancestry computations.
func (b *Broker) partitionerFor(ctx context.Context, p wire.Partitioner) (*partitioner.WASM, error) {
	key := p.Digest + "/" + hex.EncodeToString(p.Config)
	b.mu.Lock()
	w, ok := b.parts[key]
	b.mu.Unlock()
	if ok {
		return w, nil
	}
	wasm, err := b.moduleBytes(ctx, p.Digest)
	if err != nil {
		return nil, err
	}
	mod, err := b.rt.Load(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", wire.ErrPluginRejected, err)
	}
	w, err = partitioner.NewWASM(ctx, mod, p.Config, runtime.PoolOptions{})
	if err != nil {
		if errors.Is(err, runtime.ErrConfigRejected) || errors.Is(err, runtime.ErrConfigUnsupported) || errors.Is(err, runtime.ErrConfigTooLarge) {
			return nil, fmt.Errorf("%w: %v", wire.ErrBadRequest, err)
		}
		return nil, fmt.Errorf("%w: %v", wire.ErrPluginFailed, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if prev, ok := b.parts[key]; ok {
		w.Close()
		return prev, nil
	}
	b.parts[key] = w
	return w, nil
}

// resume finishes what a previous run left: topics being created or deleted, epoch changes.
func (b *Broker) resume(ctx context.Context) error {
	lister, err := b.topic.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("broker: list topics: %w", err)
	}
	var names []string
	for k := range lister.Keys() {
		names = append(names, k)
	}
	for _, name := range names {
		t, rev, err := b.getTopic(ctx, name)
		if err != nil {
			continue
		}
		if !t.Deleting && !t.Creating {
			// Streams of topics created by an older pctl: producers need fast batches.
			if err := b.forPartitions(ctx, t.MaxPartitions(), func(q int) error {
				return b.allowBatches(ctx, wire.StreamName(t.Name, q))
			}); err != nil {
				b.cfg.Logf("resume topic %s: %v", name, err)
			}
		}
		switch {
		case t.Deleting:
			err = b.finishDelete(ctx, t, rev)
		case t.Creating:
			err = b.finishCreate(ctx, t, rev)
		case t.Change != nil:
			err = b.runChange(ctx, t.Name)
		}
		if err != nil {
			b.cfg.Logf("resume topic %s: %v", name, err)
		}
	}
	return nil
}
