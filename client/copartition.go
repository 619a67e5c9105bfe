package client

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/broker/wire"
)

// This file is the co-partitioned assignor of spec/protocol.md §6.2.3: one group over several
// topics with the same partition function (an input and its changelog), whose members read the
// same partitions of each, also while the topics are expanded at different times.

// AssignorCopartitioned is the assignor of a group over several co-partitioned topics
// (spec/protocol.md §6.2.3). A CoConsumer creates its groups with it; a plain Consumer (and every
// SDK consumer today) refuses to join such a group.
const AssignorCopartitioned = "copartitioned"

// coAssignorState is the g.assignor value of a co-partitioned group: the ordered topic list, the
// first being the lead.
type coAssignorState struct {
	Assignor string   `json:"assignor"`
	Topics   []string `json:"topics,omitempty"`
}

// coGroup is what one topic's member of a co-partitioned group knows of the others.
type coGroup struct {
	topics []string
	index  int         // this topic's place in topics; 0 is the lead
	lead   *Consumer   // the lead topic's member in this process
	all    []*Consumer // every topic's, the lead first
	// warmed is closed when the lead's warm-up has ended (§6.10): the followers join then.
	warmed   chan struct{}
	warmOnce *sync.Once
	skew     int // test hook: rotate a follower's owners by this much (a wrong assignment)
}

// CoConsumer is a member of one consumer group over several co-partitioned topics
// (spec/protocol.md §6.2.3): partition p of every topic goes to the member that owns partition p
// of the first topic (the lead) while the topics have the same partition function and count, and
// a topic expanded before or after the others keeps every key's partitions on one member
// whenever the lead's sticky assignment moves no key (linear hashing, 2 or 4 members, N to 2N).
//
// It runs one Consumer per topic under one member id; each has its own leases, positions, epoch
// gates and key-level callbacks. The handler is called for records of every topic
// (Message.Topic says which), concurrently for different partitions and topics, sequentially
// within one partition of one topic. OnAssigned and OnRevoked are called per topic (use
// Consumer(topic) and its hooks to tell them apart).
type CoConsumer struct {
	topics []string
	cs     []*Consumer
}

// NewCoConsumer prepares a member of a co-partitioned group over topics (at least two, the first
// being the lead); Run starts it. The topics' current epochs must have the same partitioner
// (digest and config): otherwise it fails with wire.ErrBadRequest, since their partitions could
// not hold the same keys. opts.Assignor must be "" or AssignorCopartitioned; opts.State is not
// supported yet (wire.ErrBadRequest): a co-partitioned processor loads its state from the topics
// it consumes. A group of one of these topics created otherwise, or over another list, is
// refused when Run joins it (wire.ErrConflict).
func (c *Client) NewCoConsumer(ctx context.Context, topics []string, opts ConsumerOptions) (*CoConsumer, error) {
	if len(topics) < 2 {
		return nil, fmt.Errorf("%w: a co-partitioned group needs at least two topics, got %d: use NewConsumer for one", wire.ErrBadRequest, len(topics))
	}
	seen := map[string]bool{}
	for _, t := range topics {
		if seen[t] {
			return nil, fmt.Errorf("%w: topic %s is named twice in the co-partitioned group's topics %v", wire.ErrBadRequest, t, topics)
		}
		seen[t] = true
	}
	if opts.Assignor != "" && opts.Assignor != AssignorCopartitioned {
		return nil, fmt.Errorf("%w: a co-partitioned group uses the assignor %q, not %q: leave Assignor empty", wire.ErrBadRequest, AssignorCopartitioned, opts.Assignor)
	}
	if opts.State != nil {
		return nil, fmt.Errorf("%w: a state handler is not supported on a co-partitioned group yet: use NewConsumer on the input topic with State, or keep the state in the handler", wire.ErrBadRequest)
	}
	if opts.Member == "" {
		opts.Member = nuid.Next()
	}
	opts.Assignor = ""
	descs := make([]*wire.Topic, len(topics))
	for i, t := range topics {
		d, _, err := c.Topic(ctx, t)
		if err != nil {
			return nil, err
		}
		descs[i] = d
	}
	if err := sameFunction(topics, descs); err != nil {
		return nil, err
	}
	cc := &CoConsumer{topics: append([]string(nil), topics...)}
	for i, t := range topics {
		cn, err := c.NewConsumer(ctx, t, opts)
		if err != nil {
			return nil, err
		}
		cn.opts.Assignor = AssignorCopartitioned
		cn.co = &coGroup{topics: cc.topics, index: i, skew: opts.testCoSkew}
		cc.cs = append(cc.cs, cn)
	}
	warmed, once := make(chan struct{}), &sync.Once{}
	for _, cn := range cc.cs {
		cn.co.lead, cn.co.all, cn.co.warmed, cn.co.warmOnce = cc.cs[0], cc.cs, warmed, once
	}
	return cc, nil
}

// sameFunction checks that the topics' current epochs have one partitioner (§6.2.3).
func sameFunction(topics []string, descs []*wire.Topic) error {
	a := descs[0].Current().Partitioner
	for i := 1; i < len(descs); i++ {
		b := descs[i].Current().Partitioner
		if a.Digest != b.Digest || string(a.Config) != string(b.Config) {
			return fmt.Errorf("%w: topics %s and %s cannot be co-partitioned: %s uses the partitioner %s (digest %.12s, config %q) and %s uses %s (digest %.12s, config %q); their partitions do not hold the same keys: give them one partition function first",
				wire.ErrBadRequest, topics[0], topics[i], topics[0], a.Name, a.Digest, a.Config, topics[i], b.Name, b.Digest, b.Config)
		}
	}
	return nil
}

// Consumer returns the member's Consumer of one of its topics (nil for another topic).
func (cc *CoConsumer) Consumer(topic string) *Consumer {
	for i, t := range cc.topics {
		if t == topic {
			return cc.cs[i]
		}
	}
	return nil
}

// WarmUpStats returns what the member's warm-up did (the lead topic's member warms for all).
func (cc *CoConsumer) WarmUpStats() WarmUpStats { return cc.cs[0].WarmUpStats() }

// Member returns the member id (the same in every topic's group).
func (cc *CoConsumer) Member() string { return cc.cs[0].Member() }

// Run makes the member take part in every topic's group until ctx is done or one of them fails
// (the others then stop too, committing what they delivered). It returns the first error.
func (cc *CoConsumer) Run(ctx context.Context, h Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, cn := range cc.cs {
		wg.Add(1)
		go func(cn *Consumer) {
			defer wg.Done()
			if err := cn.Run(ctx, h); err != nil && ctx.Err() == nil {
				once.Do(func() { first = fmt.Errorf("topic %s: %w", cn.topic, err) })
				cancel()
			}
		}(cn)
	}
	wg.Wait()
	return first
}

// coJoin checks a group's assignor state against this member's declaration (§6.2.3).
func (cn *Consumer) coJoin(st coAssignorState) error {
	switch {
	case st.Assignor == AssignorCopartitioned && cn.co == nil:
		return fmt.Errorf("%w: group %s of topic %s is co-partitioned over the topics %v: join it with Client.NewCoConsumer over those topics, or use another group",
			wire.ErrConflict, cn.opts.Group, cn.topic, st.Topics)
	case st.Assignor != AssignorCopartitioned && cn.co != nil:
		return fmt.Errorf("%w: group %s of topic %s uses the assignor %q, not %q: a co-partitioned member needs a group created by one; use another group name",
			wire.ErrConflict, cn.opts.Group, cn.topic, st.Assignor, AssignorCopartitioned)
	case cn.co != nil && !sameStrings(st.Topics, cn.co.topics):
		return fmt.Errorf("%w: group %s of topic %s is co-partitioned over the topics %v, not %v: a group keeps its topic list; use another group name",
			wire.ErrConflict, cn.opts.Group, cn.topic, st.Topics, cn.co.topics)
	}
	return nil
}

// coWanted is wanted (assign_group.go) for a follower topic of a co-partitioned group: its
// record is derived from the lead topic's (§6.2.3).
func (cn *Consumer) coWanted(ctx context.Context, kv jetstream.KeyValue, members []string, complete bool, desc *wire.Topic, parts []int) (map[int]bool, error) {
	want := map[int]bool{}
	rec, rev, err := cn.readAssignment(ctx, kv)
	if err != nil {
		cn.opts.Logf("member %s: read the group's assignment of %s: %v (keeping the last one)", cn.opts.Member, cn.topic, err)
		cn.mu.Lock()
		rec, rev = cn.record, cn.recordRev
		cn.mu.Unlock()
	}
	cn.mu.Lock()
	prevView := cn.lastView
	cn.lastView = members
	cn.mu.Unlock()
	if err == nil && complete && membersSettled(rec, members, prevView) && len(members) > 0 && members[0] == cn.opts.Member {
		lead := cn.co.lead
		lrec, _, lerr := lead.readAssignment(ctx, kv)
		if lerr != nil {
			cn.opts.Logf("member %s: read the lead topic %s's assignment: %v (the next rebalance retries)", cn.opts.Member, lead.topic, lerr)
		} else if lrec != nil {
			if next, nrev, werr := cn.coWrite(ctx, kv, lrec, rec, rev, parts, desc); werr != nil {
				cn.opts.Logf("member %s: write the group's assignment of %s: %v (the next rebalance retries)", cn.opts.Member, cn.topic, werr)
			} else if next != nil {
				rec, rev = next, nrev
			}
		}
	}
	cn.mu.Lock()
	cn.record, cn.recordRev = rec, rev
	cn.mu.Unlock()
	if rec == nil {
		return want, nil
	}
	assignable := map[int]bool{}
	for _, q := range parts {
		assignable[q] = true
	}
	for j, q := range rec.Partitions {
		if j < len(rec.Owners) && rec.Owners[j] >= 0 && rec.Owners[j] < len(rec.Members) &&
			rec.Members[rec.Owners[j]] == cn.opts.Member && assignable[q] {
			want[q] = true
		}
	}
	return want, nil
}

// coWrite computes the follower record from the lead's and writes it when it differs from the
// recorded one (nil, 0, nil when it does not).
func (cn *Consumer) coWrite(ctx context.Context, kv jetstream.KeyValue, lrec, rec *wire.Assignment, rev uint64, parts []int, desc *wire.Topic) (*wire.Assignment, uint64, error) {
	lead := cn.co.lead
	lead.mu.Lock()
	ldesc := lead.desc
	lead.mu.Unlock()
	if ldesc.Epoch(lrec.Epoch) == nil {
		lead.refresh(ctx)
		lead.mu.Lock()
		ldesc = lead.desc
		lead.mu.Unlock()
		if ldesc.Epoch(lrec.Epoch) == nil {
			return nil, 0, fmt.Errorf("%w: the lead topic %s's record is of epoch %d, which its descriptor does not have yet", wire.ErrUnavailable, lead.topic, lrec.Epoch)
		}
	}
	if a, b := ldesc.Epoch(lrec.Epoch).Partitioner, desc.Current().Partitioner; a.Digest != b.Digest || string(a.Config) != string(b.Config) {
		cn.opts.Logf("member %s: topic %s (partitioner %s) and its lead %s (partitioner %s) have different functions now: partitions agree again when both have one (spec/protocol.md §6.2.3)",
			cn.opts.Member, cn.topic, b.Name, lead.topic, a.Name)
	}
	next, err := CoPartitionedAssignment(lrec, cn.c.TopicPlacer(ctx, ldesc), rec, desc, parts, cn.c.TopicPlacer(ctx, desc), time.Now())
	if err != nil {
		return nil, 0, err
	}
	if cn.co.skew != 0 && len(next.Members) > 0 {
		for j := range next.Owners {
			next.Owners[j] = (next.Owners[j] + cn.co.skew) % len(next.Members)
		}
	}
	if rec != nil && !needsAssignment(rec, next.Members, next.Partitions, next.Epoch) && sameInts(rec.Owners, next.Owners) {
		return nil, 0, nil
	}
	nrev, err := cn.storeAssignment(ctx, kv, next, rec == nil, rev, func(size int) error {
		return fmt.Errorf("%w: group %s: the assignment of %d partitions of %s takes %d bytes, more than the group bucket holds (%d)",
			wire.ErrBadRequest, cn.opts.Group, len(parts), cn.topic, size, maxAssignmentRecord)
	}, fmt.Sprintf("wrote the co-partitioned assignment of %s round %d (epoch %d, lead round %d, %d members, %d partitions)",
		cn.topic, next.Round, next.Epoch, lrec.Round, len(next.Members), len(parts)))
	if err != nil {
		return nil, 0, err
	}
	return next, nrev, nil
}

// CoPartitionedAssignment computes a follower topic's record of a co-partitioned group
// (spec/protocol.md §6.2.3) from the lead topic's record lead (leadPlace evaluates the lead's
// partitioners), the follower's previous record (nil for the first), its descriptor t, its sorted
// assignable partitions, and place for its partitioners. Moved and MovedModulo compare with prev
// as in §6.2.2. The result does not depend on now except for its At fields.
func CoPartitionedAssignment(lead *wire.Assignment, leadPlace PlaceFunc, prev *wire.Assignment, t *wire.Topic, partitions []int, place PlaceFunc, now time.Time) (*wire.Assignment, error) {
	if lead == nil || len(lead.Members) == 0 {
		return nil, fmt.Errorf("%w: a co-partitioned assignment needs the lead topic's record with at least one member", wire.ErrBadRequest)
	}
	if !sort.IntsAreSorted(partitions) {
		return nil, fmt.Errorf("%w: partitions must be sorted", wire.ErrBadRequest)
	}
	members := lead.Members
	m := len(members)
	epoch := t.Current().Epoch
	next := &wire.Assignment{Assignor: AssignorCopartitioned, Round: 1, Epoch: epoch,
		Members: append([]string(nil), members...), Partitions: append([]int(nil), partitions...),
		Owners: make([]int, len(partitions)), At: now.UTC().Format(time.RFC3339)}
	index := map[string]int{}
	for i, x := range members {
		index[x] = i
	}
	// lead(k) for every sample key: an index in members, or -1.
	lp := make([]int32, len(sampleKeys))
	if err := leadPlace(lead.Epoch, sampleKeys, lp); err != nil {
		return nil, err
	}
	leadOwner := map[int]int{}
	for j, q := range lead.Partitions {
		if j < len(lead.Owners) && lead.Owners[j] >= 0 && lead.Owners[j] < m {
			leadOwner[q] = lead.Owners[j]
		}
	}
	leadOf := make([]int, len(sampleKeys))
	for k, q := range lp {
		x, ok := leadOwner[int(q)]
		if !ok {
			x = -1
		}
		leadOf[k] = x
	}
	// K_q under the follower's epoch that defines each partition: the current one, or for a
	// partition shrunk away the newest epoch that has it.
	defining := func(q int) int {
		for i := len(t.Epochs) - 1; i >= 0; i-- {
			if q < t.Epochs[i].Partitions {
				return t.Epochs[i].Epoch
			}
		}
		return epoch
	}
	placed := map[int][]int32{}
	counts := make([][]int, len(partitions)) // counts[j][x] = |{k in K_q : lead(k) = x}|
	for j, q := range partitions {
		e := defining(q)
		ps, ok := placed[e]
		if !ok {
			ps = make([]int32, len(sampleKeys))
			if err := place(e, sampleKeys, ps); err != nil {
				return nil, err
			}
			placed[e] = ps
		}
		counts[j] = make([]int, m)
		for k, p := range ps {
			if int(p) == q && leadOf[k] >= 0 {
				counts[j][leadOf[k]]++
			}
		}
	}
	prevOwner := map[int]int{}
	if prev != nil {
		next.Round = prev.Round + 1
		for j, q := range prev.Partitions {
			if j < len(prev.Owners) && prev.Owners[j] >= 0 && prev.Owners[j] < len(prev.Members) {
				if x, ok := index[prev.Members[prev.Owners[j]]]; ok {
					prevOwner[q] = x
				}
			}
		}
	}
	for j, q := range partitions {
		px, hasPrev := prevOwner[q]
		best := -1
		for x := 0; x < m; x++ {
			if counts[j][x] > 0 && (best < 0 || counts[j][x] > counts[j][best]) {
				best = x
			}
		}
		switch {
		case hasPrev && counts[j][px] > 0: // step 1
			next.Owners[j] = px
		case best >= 0: // step 2
			next.Owners[j] = best
		case hasPrev: // step 3
			next.Owners[j] = px
		default:
			next.Owners[j] = j % m
		}
	}
	if prev != nil && len(prev.Members) > 0 && t.Epoch(prev.Epoch) != nil {
		mv, err := MovedKeys(prev, next, place)
		if err != nil {
			return nil, err
		}
		mm, err := MovedKeys(ModuloAssignment(prev.Members, prev.Partitions, prev.Epoch), ModuloAssignment(next.Members, next.Partitions, next.Epoch), place)
		if err != nil {
			return nil, err
		}
		next.Moved, next.MovedModulo = &mv, &mm
		next.History = append(next.History, prev.History...)
	}
	next.History = append(next.History, wire.AssignmentSummary{Round: next.Round, Epoch: epoch, Members: m, Partitions: len(partitions),
		Moved: next.Moved, MovedModulo: next.MovedModulo, At: next.At})
	if len(next.History) > historyLen {
		next.History = next.History[len(next.History)-historyLen:]
	}
	return next, nil
}

func sameInts(a, b []int) bool {
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
