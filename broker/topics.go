package broker

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/logging"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// MaxTopicPartitions is the most partitions a topic may have.
const MaxTopicPartitions = 16384

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
		return nil, &wire.TopicCreatingError{Topic: t.Name}
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
	replicas := req.Replicas
	if replicas == 0 {
		replicas = b.cfg.Replicas
	}
	if err := validPlacement(replicas, req.PlacementTags); err != nil {
		return nil, err
	}
	var compact *wire.Compaction
	switch {
	case req.Compact && req.Backfill:
		return nil, fmt.Errorf("%w: --backfill is for plain topics; a compacted topic always backfills at epoch changes", wire.ErrBadRequest)
	case req.Backfill && req.DeleteRetentionMS != 0:
		return nil, fmt.Errorf("%w: --delete-retention is for compacted topics (--compact), not --backfill", wire.ErrBadRequest)
	case req.Backfill:
		// A plain topic with backfill has key subjects (spec/protocol.md §10.1) without
		// compaction: its copies are chained per key subject (§10.3).
	case req.Compact:
		d := req.DeleteRetentionMS
		if d == 0 {
			d = wire.DefaultDeleteRetentionMS
		}
		if d < 1000 {
			return nil, fmt.Errorf("%w: --delete-retention %v: a tombstone is kept at least 1s (JetStream's smallest message TTL)", wire.ErrBadRequest, time.Duration(d)*time.Millisecond)
		}
		compact = &wire.Compaction{DeleteRetentionMS: d}
	case req.DeleteRetentionMS != 0:
		return nil, fmt.Errorf("%w: --delete-retention is for compacted topics (--compact)", wire.ErrBadRequest)
	}
	p, err := b.resolvePartitioner(ctx, req.Partitioner, req.Config)
	if err != nil {
		return nil, err
	}
	t := &wire.Topic{Name: req.Topic, ID: nuid.Next(), Created: time.Now().UTC(), Creating: true,
		Epochs:   []wire.Epoch{{Epoch: 1, Partitioner: p, Partitions: req.Partitions, Started: time.Now().UTC()}},
		Replicas: replicas, PlacementTags: req.PlacementTags, Compact: compact, Backfill: req.Backfill}
	// One bound for the whole request (the descriptor, then the streams), within the client's
	// default request timeout.
	giveUp := time.Now().Add(createPatience)
	rev, err := b.createTopicKey(ctx, t, giveUp)
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
	mu := b.locks.get(t.Name)
	mu.Lock()
	err = b.finishCreate(ctx, t, rev)
	// A stream the cluster is slow to create (an election, a loaded node: one JetStream call
	// fails after opTimeout) is retried within the request, the topic's lock released between
	// tries, so that the request answers once the topic exists rather than after one slow call.
	for pause := 100 * time.Millisecond; err != nil && transientCreateErr(err) && ctx.Err() == nil && time.Now().Before(giveUp); pause = min(2*pause, 2*time.Second) {
		b.cfg.Logger.Warn("topic creation: retrying", "topic", t.Name, "error", err)
		mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		mu.Lock()
		var cur *wire.Topic
		var crev uint64
		cur, crev, err = b.getTopic(ctx, t.Name)
		switch {
		case err != nil:
		case cur.ID != t.ID || cur.Deleting:
			err = fmt.Errorf("%w: topic %s was deleted while being created", wire.ErrConflict, t.Name)
		case !cur.Creating:
			err = nil // another broker's retry loop finished it
		default:
			err = b.finishCreate(ctx, cur, crev)
		}
	}
	if err != nil && errors.Is(err, wire.ErrBadRequest) {
		// The cluster can never hold these streams (too few servers for the replicas, no server
		// with the placement tags): undo the creation rather than retry it for ever.
		if t, rev, gerr := b.getTopic(ctx, req.Topic); gerr == nil && t.Creating {
			t.Deleting = true
			if rev, gerr = b.putTopic(ctx, t, rev); gerr == nil {
				_ = b.finishDelete(ctx, t, rev)
			}
		}
		mu.Unlock()
		return nil, err
	}
	mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%w (the topic is recorded as being created; the broker keeps retrying)", err)
	}
	t, rev, err = b.getTopic(ctx, t.Name)
	if err != nil {
		return nil, err
	}
	b.cfg.Logger.Info("topic created", "topic", t.Name, "id", t.ID, "partitions", req.Partitions, "partitioner", p.Name, "replicas", replicas,
		"placement_tags", logging.Strings(req.PlacementTags))
	return wire.TopicReply{Topic: *t, Revision: rev}, nil
}

// createPatience bounds how long a topic.new request retries the creation of its streams before
// it answers wire.ErrUnavailable (the broker's retry loop goes on after it): within a client's
// default request timeout (30 s), so that the client gets the answer.
const createPatience = 20 * time.Second

// transientCreateErr tells a failure worth retrying within the request (the cluster slow or
// electing) from one that no retry changes: a bad request (the cluster can never hold these
// streams) or a conflict (the topic deleted meanwhile).
func transientCreateErr(err error) bool {
	return !errors.Is(err, wire.ErrBadRequest) && !errors.Is(err, wire.ErrConflict)
}

// finishCreate creates the partition streams of a topic being created, then clears Creating.
// Idempotent: a broker that died halfway calls it again on start.
func (b *Broker) finishCreate(ctx context.Context, t *wire.Topic, rev uint64) error {
	cur := t.Current()
	err := b.forPartitions(ctx, cur.Partitions, func(q int) error {
		if h := b.cfg.Testing.CreateHook(); h != nil {
			if err := h(t.Name, q); err != nil {
				return err
			}
		}
		return b.ensureStream(ctx, t, q, wire.StreamSubject(t.Name, cur.Epoch, q, t.KeySubjects()), cur.Epoch)
	})
	if err != nil {
		return err
	}
	id := t.ID
	for attempt := 0; ; attempt++ {
		t.Creating = false
		_, err = b.putTopic(ctx, t, rev)
		if !errors.Is(err, wire.ErrConflict) || attempt >= 20 {
			return err
		}
		// Another broker (its retry loop) may have finished the creation meanwhile.
		if t, rev, err = b.getTopic(ctx, t.Name); err != nil {
			return err
		}
		switch {
		case t.ID != id || t.Deleting:
			return fmt.Errorf("%w: topic %s was deleted while being created", wire.ErrConflict, t.Name)
		case !t.Creating:
			return nil
		}
	}
}

// forPartitions runs f for partitions 0..n-1, Config.StreamOpsInFlight at a time (no lock is held
// across f's network calls). After the first failure no new partition is started; the failures of
// the ones in flight are collected too, and the error names each failed partition
// (partitionErrors).
func (b *Broker) forPartitions(ctx context.Context, n int, f func(q int) error) error {
	return forEach(ctx, n, b.cfg.StreamOpsInFlight, f)
}

// forEach is forPartitions with the concurrency given.
func forEach(ctx context.Context, n, inFlight int, f func(q int) error) error {
	if inFlight < 1 {
		inFlight = 1
	}
	sem := make(chan struct{}, inFlight)
	var mu sync.Mutex
	var errs partitionErrors
	var wg sync.WaitGroup
	for q := 0; q < n; q++ {
		sem <- struct{}{} // a slot first, then the look at failures: one may have come meanwhile
		mu.Lock()
		failed := len(errs.failed) > 0
		mu.Unlock()
		if failed || ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func(q int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(q); err != nil {
				mu.Lock()
				errs.add(q, err)
				mu.Unlock()
			}
		}(q)
	}
	wg.Wait()
	if len(errs.failed) > 0 {
		return &errs
	}
	return ctx.Err()
}

// partitionErrors are the failures of a step run over many partitions, each with its partition.
// It unwraps to the first failure (the lowest partition), so errors.Is and the error codes on the
// wire see that one, as they did when a step stopped at its first failure.
type partitionErrors struct {
	failed []int // partitions, ascending
	errs   map[int]error
}

// maxNamedFailures bounds the failures an error message spells out.
const maxNamedFailures = 3

func (e *partitionErrors) add(q int, err error) {
	if e.errs == nil {
		e.errs = map[int]error{}
	}
	i, _ := slices.BinarySearch(e.failed, q)
	e.failed = slices.Insert(e.failed, i, q)
	e.errs[q] = err
}

func (e *partitionErrors) Unwrap() error { return e.errs[e.failed[0]] }

func (e *partitionErrors) Error() string {
	if len(e.failed) == 1 {
		return fmt.Sprintf("partition %d: %v", e.failed[0], e.errs[e.failed[0]])
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d partitions failed: ", len(e.failed))
	for i, q := range e.failed {
		if i == maxNamedFailures {
			fmt.Fprintf(&sb, "; and %d more (partitions %s)", len(e.failed)-i, logging.Ints(e.failed[i:]).LogValue().String())
			break
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		fmt.Fprintf(&sb, "partition %d: %v", q, e.errs[q])
	}
	return sb.String()
}

// ensureStream creates partition q's stream bound to subject, the binding of epoch `epoch`, with
// the topic's replicas and placement, if it does not exist. An existing stream is left as it is
// (its subject is the epoch machinery's business, its replicas the reconfiguration's).
func (b *Broker) ensureStream(ctx context.Context, t *wire.Topic, q int, subject string, epoch int) error {
	_, err := b.createStream(ctx, t, q, subject, epoch)
	return err
}

// createStream is ensureStream that also says whether the stream now has exactly the
// configuration asked for (created, or found identical: JetStream answers a create of an
// existing stream with the same configuration with success), so that its subject and binding
// need no further look.
func (b *Broker) createStream(ctx context.Context, t *wire.Topic, q int, subject string, epoch int) (bool, error) {
	ctx, cancel := opContext(ctx)
	defer cancel()
	cfg := jetstream.StreamConfig{
		Name:        wire.StreamName(t.Name, q),
		Description: fmt.Sprintf("pctl topic %s partition %d", t.Name, q),
		Subjects:    []string{subject},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Duplicates:  2 * time.Minute,
		MaxMsgSize:  b.cfg.MaxRecordBytes,
		Replicas:    b.replicas(t),
		Placement:   placement(t.PlacementTags),
		AllowDirect: true,
		Metadata:    map[string]string{metaBindingEpoch: strconv.Itoa(epoch)},
		// Producers send fast batches (spec/protocol.md §5.1.1).
		AllowBatchPublish: true,
	}
	if t.Compact != nil {
		// One message per subject (a subject per key: spec/protocol.md §10.1), and TTLs for
		// tombstones.
		cfg.MaxMsgsPerSubject = 1
		cfg.AllowMsgTTL = true
	}
	b.streamAdds.RLock() // see streamAdds
	_, err := b.js.CreateStream(ctx, cfg)
	b.streamAdds.RUnlock()
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return false, b.allowBatches(ctx, wire.StreamName(t.Name, q), subject)
	}
	if err == nil {
		return true, nil
	}
	return false, streamError(fmt.Sprintf("create stream %s", wire.StreamName(t.Name, q)), b.replicas(t), t.PlacementTags, err)
}

// metaBindingEpoch is the stream metadata key that records which epoch's change last bound the
// stream's subject, so that a step of an older change (a broker that was paused, then resumed)
// never moves it back (setSubject).
const metaBindingEpoch = "pctl_binding_epoch"

// replicas returns a topic's replicas (the broker's default for descriptors that predate them).
func (b *Broker) replicas(t *wire.Topic) int {
	if t.Replicas > 0 {
		return t.Replicas
	}
	return b.cfg.Replicas
}

func placement(tags []string) *jetstream.Placement {
	if len(tags) == 0 {
		return nil
	}
	return &jetstream.Placement{Tags: tags}
}

// MaxReplicas is JetStream's largest replication factor.
const MaxReplicas = 5

func validPlacement(replicas int, tags []string) error {
	if replicas < 1 || replicas > MaxReplicas {
		return fmt.Errorf("%w: --replicas %d: a partition stream has 1 to %d replicas", wire.ErrBadRequest, replicas, MaxReplicas)
	}
	for _, tag := range tags {
		if tag == "" || tag == "!" || strings.ContainsAny(tag, " \t\n,") {
			return fmt.Errorf("%w: --placement-tags: tag %q is empty or has a space or comma; give tags such as az:1,ssd", wire.ErrBadRequest, tag)
		}
	}
	return nil
}

// streamError words a failed stream create or update: what the cluster cannot do (a bad request,
// never retried) or a transient failure (unavailable, retried).
func streamError(what string, replicas int, tags []string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10074: // replicas > 1 not supported in non-clustered mode
			return fmt.Errorf("%w: %s: %d replicas need a JetStream cluster; this server runs alone (use --replicas 1, or 'pctl serve --nats URL' on a cluster)", wire.ErrBadRequest, what, replicas)
		case 10005, 10023: // no suitable peers for placement; insufficient resources
			return fmt.Errorf("%w: %s: the cluster cannot place %d replica(s)%s now (%s): too few JetStream servers are running with room%s; start them, or use fewer --replicas or other --placement-tags", wire.ErrBadRequest, what, replicas, tagText(tags), apiErr.Description, tagText(tags))
		}
	}
	return fmt.Errorf("%w: %s: %v", wire.ErrUnavailable, what, err)
}

func tagText(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	return " with placement tags " + strings.Join(tags, ",")
}

// allowBatches turns on fast batch publishing for a partition stream created by an older pctl
// (producers need it, spec/protocol.md §5.1.1). A missing stream is left alone, and so is one
// not bound to subject (the binding the caller read in the descriptor): the update writes the
// whole configuration back, and JetStream has no compare-and-set on it, so it must never carry
// a subject an epoch change has moved on from (setSubject turns fast batches on when it moves a
// stream).
func (b *Broker) allowBatches(ctx context.Context, name, subject string) error {
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
	if len(cfg.Subjects) != 1 || cfg.Subjects[0] != subject {
		b.cfg.Logf("stream %s: bound to %v, not %s: fast batches are turned on when an epoch change binds it", name, cfg.Subjects, subject)
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
	if err := wire.ValidTopic(req.Topic); err != nil {
		return nil, err
	}
	mu := b.locks.get(req.Topic)
	mu.Lock()
	defer mu.Unlock()
	t, rev, err := b.getTopic(ctx, req.Topic)
	if errors.Is(err, wire.ErrNotFound) {
		// Not topicNotFound's advice to create it: that is not what someone deleting wants.
		return nil, fmt.Errorf("%w: topic %q does not exist, so there is nothing to delete; 'pctl topic list' shows the topics", wire.ErrNotFound, req.Topic)
	}
	if err != nil {
		return nil, err
	}
	if !t.Deleting {
		t.Deleting = true
		if rev, err = b.putTopic(ctx, t, rev); err != nil {
			return nil, err
		}
	}
	if err := b.finishDelete(ctx, t, rev); err != nil {
		return nil, fmt.Errorf("%w (the topic is recorded as being deleted; the broker keeps retrying)", err)
	}
	b.cfg.Logger.Info("topic deleted", "topic", t.Name, "id", t.ID, "streams", t.MaxPartitions())
	return struct{}{}, nil
}

func (b *Broker) finishDelete(ctx context.Context, t *wire.Topic, rev uint64) error {
	err := b.forPartitions(ctx, t.MaxPartitions(), func(q int) error {
		ctx, cancel := opContext(ctx)
		defer cancel()
		err := b.js.DeleteStream(ctx, wire.StreamName(t.Name, q))
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w: delete stream %s: %v", wire.ErrUnavailable, wire.StreamName(t.Name, q), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if keys, err := b.groupKeys(ctx, t.ID); err == nil {
		for _, k := range keys {
			_ = b.group.Delete(ctx, k) // the bucket refuses purges (rollups): groups.go
		}
	}
	err = b.deleteTopicKey(ctx, t.Name, rev)
	if errors.Is(err, wire.ErrConflict) {
		// Another broker may have finished the deletion meanwhile (or written the descriptor
		// again while deleting: then the retry loop finishes it).
		if _, _, gerr := b.getTopic(ctx, t.Name); errors.Is(gerr, wire.ErrNotFound) {
			return nil
		}
	}
	return err
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
		var rerr error
		if d, rerr = b.resolveUploaded(ctx, ref); rerr != nil {
			return nil, rerr
		}
	}
	for _, name := range plugins.BuiltinNames() {
		if wasm, _ := plugins.Builtin(name); runtime.Digest(wasm) == d {
			return wasm, nil
		}
	}
	wasm, err := b.objs.GetBytes(ctx, d)
	if errors.Is(err, jetstream.ErrObjectNotFound) && b.pluginStoredAtLeader(ctx, d) {
		// Uploaded through another broker and not yet on the replica that answered: the
		// leader has it, so wait for the replica (reads of the object go to any replica).
		for pause := 20 * time.Millisecond; errors.Is(err, jetstream.ErrObjectNotFound) && pause < 3*time.Second; pause *= 2 {
			time.Sleep(pause)
			wasm, err = b.objs.GetBytes(ctx, d)
		}
	}
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

// resolveUploaded turns the name of an uploaded plugin (its metadata name, as 'pctl plugin list
// --remote' shows it) or a unique prefix of at least 8 hex digits of a digest (built-in or
// uploaded) into the full digest. Two uploaded plugins with one name (two versions, say) make the
// name ambiguous: the error lists their digests. Built-in names never get here (moduleBytes
// takes them first), so an upload cannot shadow a built-in.
func (b *Broker) resolveUploaded(ctx context.Context, ref string) (string, error) {
	type cand struct{ digest, version string }
	var byName, byPrefix []cand
	prefix := strings.ToLower(strings.TrimPrefix(ref, "sha256:"))
	isPrefix := len(prefix) >= 8 && len(prefix) < 64 && strings.Trim(prefix, "0123456789abcdef") == ""
	if isPrefix {
		for _, name := range plugins.BuiltinNames() {
			wasm, _ := plugins.Builtin(name)
			if d := runtime.Digest(wasm); strings.HasPrefix(d, prefix) {
				byPrefix = append(byPrefix, cand{d, name})
			}
		}
	}
	lister, err := b.objs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return "", fmt.Errorf("%w: list plugins: %v", wire.ErrUnavailable, err)
	}
	for _, oi := range lister {
		var info wire.PluginInfo
		if json.Unmarshal([]byte(oi.Metadata["info"]), &info) != nil {
			continue
		}
		if info.Name == ref {
			byName = append(byName, cand{info.Digest, info.Version})
		}
		if isPrefix && strings.HasPrefix(info.Digest, prefix) {
			byPrefix = append(byPrefix, cand{info.Digest, info.Name + " " + info.Version})
		}
	}
	list := func(cs []cand) string {
		var parts []string
		for _, c := range cs {
			parts = append(parts, "sha256:"+c.digest+" ("+c.version+")")
		}
		return strings.Join(parts, ", ")
	}
	switch {
	case len(byName) == 1:
		return byName[0].digest, nil
	case len(byName) > 1:
		return "", fmt.Errorf("%w: plugin name %q is ambiguous: %d uploaded plugins have it: %s; give one's digest (or a unique prefix of it)", wire.ErrBadRequest, ref, len(byName), list(byName))
	case len(byPrefix) == 1:
		return byPrefix[0].digest, nil
	case len(byPrefix) > 1:
		return "", fmt.Errorf("%w: digest prefix %s is ambiguous: %s; give more digits", wire.ErrBadRequest, prefix, list(byPrefix))
	case isPrefix:
		return "", fmt.Errorf("%w: no plugin's digest starts with %s; 'pctl plugin list --remote' shows the plugins", wire.ErrNotFound, prefix)
	}
	return "", fmt.Errorf("%w: plugin %q is not a built-in (%s), nor the name of an uploaded plugin, nor a sha256 digest (64 hex digits, or a unique prefix of at least 8); 'pctl plugin list --remote' shows the plugins", wire.ErrNotFound, ref, strings.Join(plugins.BuiltinNames(), ", "))
}

// pluginStoredAtLeader reports whether the plugins bucket's stream leader holds the object (and
// it is not deleted).
func (b *Broker) pluginStoredAtLeader(ctx context.Context, digest string) bool {
	e, err := b.leaderLast(ctx, "OBJ_"+wire.PluginsBucket, "$O."+wire.PluginsBucket+".M."+base64.URLEncoding.EncodeToString([]byte(digest)))
	if err != nil {
		return false
	}
	var info struct {
		Deleted bool `json:"deleted"`
	}
	return json.Unmarshal(e.value, &info) == nil && !info.Deleted
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
