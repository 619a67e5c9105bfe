package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// apiGroupList reports a topic's consumer groups: live members and committed positions.
func (b *Broker) apiGroupList(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.TopicRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	t, _, err := b.getTopic(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	groups := map[string]*wire.GroupInfo{}
	get := func(g string) *wire.GroupInfo {
		if groups[g] == nil {
			groups[g] = &wire.GroupInfo{Group: g, Members: []string{}, Positions: make([]uint64, t.MaxPartitions())}
		}
		return groups[g]
	}
	keys, err := b.groupKeys(ctx, t.ID)
	if err == nil {
		for _, k := range keys {
			if g, ok := groupAssignorKey(t.ID, k, ".g.assignor"); ok {
				if e, err := b.group.Get(ctx, k); err == nil {
					var st wire.AssignorState
					if json.Unmarshal(e.Value(), &st) == nil {
						get(g).Assignor = st.Assignor
					}
				}
				continue
			}
			if g, ok := groupAssignorKey(t.ID, k, ".g.assignment"); ok {
				if e, err := b.group.Get(ctx, k); err == nil {
					var a wire.Assignment
					if json.Unmarshal(e.Value(), &a) == nil {
						get(g).Assignments = a.History
					}
				}
				continue
			}
			g, kind, name, ok := wire.ParseGroupKey(t.ID, k)
			if !ok {
				continue
			}
			e, err := b.group.Get(ctx, k)
			if err != nil {
				continue
			}
			switch kind {
			case "m":
				var ms wire.MemberState
				if json.Unmarshal(e.Value(), &ms) == nil && time.Since(e.Created()) < 30*time.Second {
					get(g).Members = append(get(g).Members, name)
				}
			case "p":
				var ps wire.PartitionState
				q, err := strconv.Atoi(name)
				if json.Unmarshal(e.Value(), &ps) == nil && err == nil && q < t.MaxPartitions() {
					get(g).Positions[q] = ps.Position
				}
			}
		}
	}
	reply := wire.GroupListReply{Groups: []wire.GroupInfo{}}
	for _, g := range groups {
		if g.Assignor == "" {
			g.Assignor = wire.AssignorModulo // spec/protocol.md §6.1: no key means modulo
		}
		sort.Strings(g.Members)
		reply.Groups = append(reply.Groups, *g)
	}
	sort.Slice(reply.Groups, func(i, j int) bool { return reply.Groups[i].Group < reply.Groups[j].Group })
	return reply, nil
}

// groupKeys returns the keys of a topic's consumer groups (<topic id>.>), sorted: the union of
// two listings. The groups bucket keeps one revision per key, and a listing can miss a key
// re-put while it runs (nats.go's watcher counts the messages pending when it starts): a
// member's heartbeat, a position's commit. A key re-put during both listings can still be
// missed, so a decision that must not miss one reads the keys it needs by name (retire's
// groupsBehind); a report (the group list) or a clean-up (topic delete) takes the union.
// The caller bounds it (a topic of thousands of partitions has tens of thousands of keys).
func (b *Broker) groupKeys(ctx context.Context, topicID string) ([]string, error) {
	seen := map[string]bool{}
	for range 2 {
		lister, err := b.group.ListKeysFiltered(ctx, topicID+".>")
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: list consumer group keys: %v", wire.ErrUnavailable, err)
		}
		for k := range lister.Keys() {
			seen[k] = true
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys, nil
}

// groupAssignorKey returns the group of a "<topic id>.<group><suffix>" key (the assignor and
// assignment keys of spec/protocol.md §6.1, §6.2.1).
func groupAssignorKey(topicID, key, suffix string) (string, bool) {
	if !strings.HasPrefix(key, topicID+".") || !strings.HasSuffix(key, suffix) {
		return "", false
	}
	g := key[len(topicID)+1 : len(key)-len(suffix)]
	return g, wire.ValidGroup(g) == nil
}

// groupBucketStream is the JetStream stream behind the group bucket.
const groupBucketStream = "KV_" + wire.GroupsBucket

// maxGroupValue bounds one value in the group bucket (a position or a member's heartbeat is a
// few hundred bytes): a member cannot fill the bucket's storage with one huge write.
const maxGroupValue = 64 << 10

// ensureGroupBucket creates the consumer-group bucket, or hardens an existing one, so that no
// write to one group's keys can change another group's (spec/protocol.md §8): no rollups (a
// "Nats-Rollup: all" published to any key of the bucket would otherwise wipe every group of
// every topic), no purges and no message deletes through the JetStream API (the bucket's state
// changes only by writes to its keys, which credentials scope per group), and a size limit per
// value. Keys are removed with delete markers, never purged. A bucket made by an older broker is
// updated in place on start (nothing to do when it is already so).
func (b *Broker) ensureGroupBucket(ctx context.Context) (jetstream.KeyValue, error) {
	s, err := b.js.Stream(ctx, groupBucketStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: wire.GroupsBucket, Description: "pctl consumer-group state", History: 1,
			Storage: jetstream.FileStorage, Replicas: b.cfg.Replicas, MaxValueSize: maxGroupValue,
		}); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return nil, err
		}
		s, err = b.js.Stream(ctx, groupBucketStream)
	}
	if err != nil {
		return nil, err
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowRollup || !cfg.DenyPurge || !cfg.DenyDelete || cfg.MaxMsgSize <= 0 || cfg.MaxMsgSize > maxGroupValue || cfg.Replicas != b.cfg.Replicas {
		cfg.AllowRollup, cfg.DenyPurge, cfg.DenyDelete, cfg.Replicas = false, true, true, b.cfg.Replicas
		if cfg.MaxMsgSize <= 0 || cfg.MaxMsgSize > maxGroupValue {
			cfg.MaxMsgSize = maxGroupValue
		}
		if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("harden the group bucket (no rollups, no purges): %w", err)
		}
	}
	return b.js.KeyValue(ctx, wire.GroupsBucket)
}
