package broker

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
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
	lister, err := b.group.ListKeys(ctx, jetstream.IgnoreDeletes())
	if err == nil {
		for k := range lister.Keys() {
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
		sort.Strings(g.Members)
		reply.Groups = append(reply.Groups, *g)
	}
	sort.Slice(reply.Groups, func(i, j int) bool { return reply.Groups[i].Group < reply.Groups[j].Group })
	return reply, nil
}
