package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/conformance"
	"pctl.dev/pctl/internal/proto"
)

// Status is a snapshot of what the broker can see: every topic with its descriptor, its
// partition streams' state and its consumer groups (members, positions, lag, gate waits), and
// the plugins with the conformance reports of their uploads. The status page and the metrics of
// 'pctl serve --http' are made from it. Taking one costs a few JetStream requests per topic
// (stream list, group state watch), so callers cache it.
type Status struct {
	Broker  BrokerStatus   `json:"broker"`
	Topics  []TopicStatus  `json:"topics"`
	Plugins []PluginStatus `json:"plugins"`
	Taken   time.Time      `json:"taken"`
	Took    time.Duration  `json:"took_ns"`
}

// BrokerStatus describes this broker.
type BrokerStatus struct {
	ID        string    `json:"id"`
	ClientURL string    `json:"client_url"`
	Embedded  bool      `json:"embedded"`
	Started   time.Time `json:"started"`
	Replicas  int       `json:"replicas"`
}

// TopicStatus is one topic.
type TopicStatus struct {
	Topic    wire.Topic     `json:"descriptor"`
	Revision uint64         `json:"revision"`
	Streams  []StreamStatus `json:"streams"` // by partition, every stream the topic ever had
	Groups   []GroupStatus  `json:"groups"`
	// Backfills is every backfill the descriptor records, newest first, as `pctl topic
	// describe` words it (spec/protocol.md §10.3).
	Backfills []wire.BackfillProgress `json:"backfills"`
	Error     string                  `json:"error,omitempty"` // what could not be read
}

// StreamStatus is one partition stream.
type StreamStatus struct {
	Partition int    `json:"partition"`
	Subject   string `json:"subject"`
	LastSeq   uint64 `json:"last_seq"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	Exists    bool   `json:"exists"`
}

// GroupStatus is one consumer group of a topic.
type GroupStatus struct {
	Group      string           `json:"group"`
	Members    []MemberStatus   `json:"members"` // live ones (heartbeat within the session timeout's default)
	Partitions []GroupPartition `json:"partitions"`
	Lag        uint64           `json:"lag"`
	Gated      int64            `json:"gated"`        // records held at the gate, summed over live members
	GateWait   time.Duration    `json:"gate_wait_ns"` // their total wait
	// Assignor is the group's (spec/protocol.md §6.1; "" read as modulo); Assignment, for a
	// sticky group, its last recorded assignment's summary (§6.2.1), with the fraction of keys
	// that changed member (§6.2.2).
	Assignor   string                  `json:"assignor,omitempty"`
	Assignment *wire.AssignmentSummary `json:"assignment,omitempty"`
	// Standbys are the members warming up before they join (spec/protocol.md §6.10), in queue
	// order: live w. keys (younger than their session_ms, else the members' rule).
	Standbys []StandbyStatus `json:"standbys"`
}

// StandbyStatus is one standby of a group: warming (with the lag it last reported) or queued.
type StandbyStatus struct {
	ID      string    `json:"id"`
	Warming bool      `json:"warming"`
	Lag     int64     `json:"lag"`
	Started time.Time `json:"started"`
}

// MemberStatus is one live member.
type MemberStatus struct {
	ID        string        `json:"id"`
	Heartbeat time.Time     `json:"heartbeat"`
	Owns      []int         `json:"owns"`
	Gated     int64         `json:"gated"`
	GateWait  time.Duration `json:"gate_wait_ns"`
}

// GroupPartition is a group's state in one partition stream.
type GroupPartition struct {
	Partition int    `json:"partition"`
	Owner     string `json:"owner,omitempty"`
	Position  uint64 `json:"position"`
	End       uint64 `json:"end"`
	Lag       uint64 `json:"lag"` // records (fence markers not counted) after the committed position
}

// PluginStatus is a plugin with the conformance report of its upload (nil for built-ins, whose
// modules are checked in pctl's own CI, and for plugins uploaded before reports were kept).
type PluginStatus struct {
	wire.PluginInfo
	Report *conformance.Report `json:"report,omitempty"`
}

// leaseOwner is the owner a snapshot shows for a partition: its lease's holder while the lease
// is live as another member counts it (spec/protocol.md §6.3, §9: now < lease_end + S, S =
// min(1 s, session / 6), proto.LeaseLive), else none. lease_end is by the holder's clock, now by
// this broker's. The group's session timeout is not recorded, so S is the default session's
// (1 s), which is also the largest S of any session: the page shows an owner as long as some
// member may still count its lease as held, and never one that every member counts expired.
func leaseOwner(ps wire.PartitionState, now time.Time) string {
	if proto.LeaseLive(ps.Owner, ps.LeaseEnd, now.UnixMilli(), proto.MaxClockSkew(memberLive)) {
		return ps.Owner
	}
	return ""
}

// memberLive is how recent a member's heartbeat must be to count as live in a snapshot (the
// default session timeout).
const memberLive = 6 * time.Second

// Status takes a snapshot. Parts that cannot be read are reported in TopicStatus.Error rather
// than failing the whole snapshot; an error means not even the topic list could be read.
func (b *Broker) Status(ctx context.Context) (*Status, error) {
	start := time.Now()
	st := &Status{Broker: BrokerStatus{ID: b.id, ClientURL: b.ClientURL(), Embedded: b.srv != nil, Started: b.started, Replicas: b.cfg.Replicas},
		Topics: []TopicStatus{}, Plugins: []PluginStatus{}}
	names, err := b.topicNames(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, fmt.Errorf("%w: list topics: %v", wire.ErrUnavailable, err)
	}
	sort.Strings(names)
	for _, name := range names {
		t, rev, err := b.getTopic(ctx, name)
		if err != nil {
			continue // deleted meanwhile, or unreadable now
		}
		ts := TopicStatus{Topic: *t, Revision: rev, Streams: []StreamStatus{}, Groups: []GroupStatus{}, Backfills: t.BackfillsProgress(time.Now())}
		if err := b.streamStatus(ctx, &ts); err != nil {
			ts.Error = err.Error()
		}
		if err := b.groupStatus(ctx, &ts); err != nil && ts.Error == "" {
			ts.Error = err.Error()
		}
		st.Topics = append(st.Topics, ts)
	}
	st.Plugins = b.pluginStatus(ctx)
	st.Taken, st.Took = time.Now().UTC(), time.Since(start)
	return st, nil
}

func (b *Broker) streamStatus(ctx context.Context, ts *TopicStatus) error {
	t := &ts.Topic
	ts.Streams = make([]StreamStatus, t.MaxPartitions())
	for q := range ts.Streams {
		ts.Streams[q].Partition = q
	}
	ctx, cancel := opContext(ctx)
	defer cancel()
	l := b.js.ListStreams(ctx, jetstream.WithStreamListSubject(wire.DataPrefix+"."+t.Name+".>"))
	for si := range l.Info() {
		name, ok := strings.CutPrefix(si.Config.Name, wire.StreamPrefix+t.Name+"_")
		if !ok {
			continue
		}
		q, err := strconv.Atoi(name)
		if err != nil || q < 0 || q >= len(ts.Streams) {
			continue
		}
		s := &ts.Streams[q]
		s.Exists, s.LastSeq, s.Messages, s.Bytes = true, si.State.LastSeq, si.State.Msgs, si.State.Bytes
		if len(si.Config.Subjects) > 0 {
			s.Subject = si.Config.Subjects[0]
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("list partition streams: %v", err)
	}
	return nil
}

// groupStatus reads every group key of the topic with one watch (last values only).
func (b *Broker) groupStatus(ctx context.Context, ts *TopicStatus) error {
	t := &ts.Topic
	ctx, cancel := opContext(ctx)
	defer cancel()
	w, err := b.group.Watch(ctx, t.ID+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read consumer groups: %v", err)
	}
	defer w.Stop()
	groups := map[string]*GroupStatus{}
	get := func(g string) *GroupStatus {
		if groups[g] == nil {
			gs := &GroupStatus{Group: g, Members: []MemberStatus{}, Standbys: []StandbyStatus{}, Partitions: make([]GroupPartition, t.MaxPartitions())}
			for q := range gs.Partitions {
				gs.Partitions[q].Partition = q
			}
			groups[g] = gs
		}
		return groups[g]
	}
	now := time.Now()
loop:
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("read consumer groups: %v", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				break loop // nil: every current value has been delivered
			}
			rest, ok := strings.CutPrefix(e.Key(), t.ID+".")
			if !ok {
				continue
			}
			parts := strings.Split(rest, ".")
			if len(parts) != 3 {
				continue
			}
			g, kind, name := parts[0], parts[1], parts[2]
			switch kind {
			case "m":
				var ms wire.MemberState
				if json.Unmarshal(e.Value(), &ms) != nil || now.Sub(e.Created()) > memberLive {
					continue
				}
				gs := get(g)
				gs.Members = append(gs.Members, MemberStatus{ID: name, Heartbeat: ms.Heartbeat, Owns: ms.Owns, Gated: ms.Gated, GateWait: time.Duration(ms.GateWaitMS) * time.Millisecond})
				gs.Gated += ms.Gated
				gs.GateWait += time.Duration(ms.GateWaitMS) * time.Millisecond
			case "w":
				var ws struct {
					ID        string    `json:"id"`
					Started   time.Time `json:"started"`
					Lag       int64     `json:"lag"`
					Warming   bool      `json:"warming"`
					SessionMS int64     `json:"session_ms"`
				}
				live := memberLive
				if json.Unmarshal(e.Value(), &ws) != nil || ws.ID == "" {
					continue
				}
				if ws.SessionMS > 0 {
					live = time.Duration(ws.SessionMS) * time.Millisecond
				}
				if now.Sub(e.Created()) < live {
					gs := get(g)
					gs.Standbys = append(gs.Standbys, StandbyStatus{ID: ws.ID, Warming: ws.Warming, Lag: ws.Lag, Started: ws.Started})
				}
			case "p":
				var ps wire.PartitionState
				q, err := strconv.Atoi(name)
				if json.Unmarshal(e.Value(), &ps) != nil || err != nil || q < 0 || q >= t.MaxPartitions() {
					continue
				}
				gp := &get(g).Partitions[q]
				gp.Position = ps.Position
				gp.Owner = leaseOwner(ps, now)
			case "g":
				gs := get(g)
				switch name {
				case "assignor":
					var st wire.AssignorState
					if json.Unmarshal(e.Value(), &st) == nil {
						gs.Assignor = st.Assignor
					}
				case "assignment":
					var a wire.Assignment
					if json.Unmarshal(e.Value(), &a) == nil && len(a.History) > 0 {
						gs.Assignment = &a.History[len(a.History)-1]
					}
				}
			}
		}
	}
	for _, gs := range groups {
		for q := range gs.Partitions {
			gp := &gs.Partitions[q]
			if q < len(ts.Streams) {
				gp.End = ts.Streams[q].LastSeq
			}
			gp.Lag = t.Lag(q, gp.Position, gp.End)
			gs.Lag += gp.Lag
		}
		sort.Slice(gs.Members, func(i, j int) bool { return gs.Members[i].ID < gs.Members[j].ID })
		sort.Slice(gs.Standbys, func(i, j int) bool {
			a, b := gs.Standbys[i], gs.Standbys[j]
			if !a.Started.Equal(b.Started) {
				return a.Started.Before(b.Started)
			}
			return a.ID < b.ID
		})
		ts.Groups = append(ts.Groups, *gs)
	}
	sort.Slice(ts.Groups, func(i, j int) bool { return ts.Groups[i].Group < ts.Groups[j].Group })
	return nil
}

func (b *Broker) pluginStatus(ctx context.Context) []PluginStatus {
	out := []PluginStatus{}
	reply, err := b.apiPluginList(ctx, nil)
	if err != nil {
		return out
	}
	for _, info := range reply.(wire.PluginListReply).Plugins {
		ps := PluginStatus{PluginInfo: info}
		if !info.Builtin {
			if oi, err := b.objs.GetInfo(ctx, info.Digest); err == nil {
				if raw := oi.Metadata[reportMeta]; raw != "" {
					var rep conformance.Report
					if json.Unmarshal([]byte(raw), &rep) == nil {
						ps.Report = &rep
					}
				}
			}
		}
		out = append(out, ps)
	}
	return out
}

// Healthy reports whether the broker is alive: its NATS connection is up.
func (b *Broker) Healthy() error {
	if b.nc == nil || !b.nc.IsConnected() {
		return fmt.Errorf("%w: the broker's NATS connection is down", wire.ErrUnavailable)
	}
	return nil
}

// Ready reports whether the broker can serve: alive, JetStream answers, and the descriptor and
// group buckets can be read. (A Broker exists only once Start has resumed the work a previous
// run left unfinished, so resumption is finished too.)
func (b *Broker) Ready(ctx context.Context) error {
	if err := b.Healthy(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("%w: JetStream does not answer: %v", wire.ErrUnavailable, err)
	}
	if _, err := b.topic.Status(ctx); err != nil {
		return fmt.Errorf("%w: bucket %s: %v", wire.ErrUnavailable, wire.TopicsBucket, err)
	}
	if _, err := b.group.Status(ctx); err != nil {
		return fmt.Errorf("%w: bucket %s: %v", wire.ErrUnavailable, wire.GroupsBucket, err)
	}
	return nil
}

// NATSMonitor returns the embedded NATS server's monitoring endpoints (nats-server's own
// handlers: varz, jsz, connz, routez, subsz, healthz), to be mounted under a prefix; nil with
// Config.NATSURL (the cluster's nodes have their own monitoring ports).
func (b *Broker) NATSMonitor() map[string]http.HandlerFunc {
	if b.srv == nil {
		return nil
	}
	return map[string]http.HandlerFunc{
		"varz": b.srv.HandleVarz, "jsz": b.srv.HandleJsz, "connz": b.srv.HandleConnz,
		"routez": b.srv.HandleRoutez, "subsz": b.srv.HandleSubsz, "healthz": b.srv.HandleHealthz,
	}
}

// WatchDescriptors calls f(topic) after every descriptor change any broker announces
// (pctl.events.topic.<topic>, best effort), until ctx ends.
func (b *Broker) WatchDescriptors(ctx context.Context, f func(topic string)) error {
	sub, err := b.nc.Subscribe(wire.TopicEventSubject("*"), func(m *nats.Msg) {
		f(strings.TrimPrefix(m.Subject, wire.EventsPrefix+".topic."))
	})
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { _ = sub.Unsubscribe() })
	return nil
}
