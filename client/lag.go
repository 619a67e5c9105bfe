package client

import (
	"context"
	"fmt"

	"pctl.dev/pctl/broker/wire"
)

// GroupLag is a consumer group's progress on a topic: for each partition stream the group's
// committed position (every record up to it is drained), the stream's last sequence and the
// records between them (wire.Topic.Lag: fence markers are not records).
type GroupLag struct {
	Group      string         `json:"group"`
	Members    []string       `json:"members"`
	Partitions []PartitionLag `json:"partitions"`
	Lag        uint64         `json:"lag"`
	// Assignor is the group's (spec/protocol.md §6.1); Assignments the sticky group's recorded
	// changes with the fractions of keys that changed member, and what modulo would have moved.
	Assignor    string                   `json:"assignor"`
	Assignments []wire.AssignmentSummary `json:"assignments,omitempty"`
	// Standbys are the members warming up before they join (spec/protocol.md §6.10), in queue
	// order: each warming or queued, with the lag it last reported. Nil when the caller may not
	// read the group bucket (the producer role).
	Standbys []Standby `json:"standbys,omitempty"`
}

// PartitionLag is one partition stream's row of a GroupLag.
type PartitionLag struct {
	Partition int    `json:"partition"`
	Position  uint64 `json:"position"` // committed: every record up to it is drained
	End       uint64 `json:"end"`      // last sequence in the partition stream
	Lag       uint64 `json:"lag"`
}

// GroupLags returns the progress of every consumer group of a topic (what `pctl topic groups`
// shows): the broker's group list, the topic's descriptor and each partition stream's last
// sequence, read now, and each group's standbys (Standbys; left out when the group bucket
// cannot be read).
func (c *Client) GroupLags(ctx context.Context, topic string) ([]GroupLag, error) {
	groups, err := c.Groups(ctx, topic)
	if err != nil {
		return nil, err
	}
	t, _, err := c.Topic(ctx, topic)
	if err != nil {
		return nil, err
	}
	ends, err := c.partitionEnds(ctx, t)
	if err != nil {
		return nil, err
	}
	out := make([]GroupLag, 0, len(groups))
	for _, g := range groups {
		v := GroupLag{Group: g.Group, Members: g.Members, Partitions: []PartitionLag{}, Assignor: g.Assignor, Assignments: g.Assignments}
		if v.Assignor == "" {
			v.Assignor = wire.AssignorModulo
		}
		if v.Members == nil {
			v.Members = []string{}
		}
		for q, p := range g.Positions {
			pv := PartitionLag{Partition: q, Position: p}
			if q < len(ends) {
				pv.End = ends[q]
			}
			pv.Lag = t.Lag(q, p, pv.End)
			v.Lag += pv.Lag
			v.Partitions = append(v.Partitions, pv)
		}
		out = append(out, v)
	}
	if sb, err := c.Standbys(ctx, topic); err == nil {
		for i := range out {
			out[i].Standbys = sb[out[i].Group]
		}
	}
	return out, nil
}

// partitionEnds returns the last sequence of each of the topic's partition streams.
func (c *Client) partitionEnds(ctx context.Context, t *wire.Topic) ([]uint64, error) {
	ends := make([]uint64, t.MaxPartitions())
	for q := range ends {
		s, err := c.js.Stream(ctx, wire.StreamName(t.Name, q))
		if err != nil {
			return nil, fmt.Errorf("%w: partition %d: %v", wire.ErrUnavailable, q, err)
		}
		ends[q] = s.CachedInfo().State.LastSeq
	}
	return ends, nil
}
