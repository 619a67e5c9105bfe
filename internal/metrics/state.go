package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// stateCollector turns a broker.Status snapshot into metrics at scrape time. It is an unchecked
// collector (its series depend on the topics and groups that exist).
type stateCollector struct{ m *Metrics }

func (c *stateCollector) Describe(chan<- *prometheus.Desc) {}

var (
	descUp          = prometheus.NewDesc("pctl_status_up", "1 when the broker's state could be read at this scrape.", nil, nil)
	descSnapshot    = prometheus.NewDesc("pctl_status_snapshot_duration_seconds", "Time taken to read the broker's state (topics, streams, groups).", nil, nil)
	descEpoch       = prometheus.NewDesc("pctl_topic_epoch", "The topic's current epoch.", []string{"topic"}, nil)
	descPartitions  = prometheus.NewDesc("pctl_topic_partitions", "Partitions of the topic's current epoch.", []string{"topic"}, nil)
	descChanging    = prometheus.NewDesc("pctl_topic_epoch_change_state", "1 for the state (planned, created, fenced) of the topic's epoch change in progress.", []string{"topic", "to", "state"}, nil)
	descChangeAge   = prometheus.NewDesc("pctl_topic_epoch_change_age_seconds", "How long the topic's epoch change in progress has been running.", []string{"topic"}, nil)
	descEpochRec    = prometheus.NewDesc("pctl_topic_epoch_records_total", "Records stored in the topic under an epoch, by any producer (from the partition streams and the epochs' boundaries; fence markers not counted); the newest epochs only.", []string{"topic", "epoch"}, nil)
	descBytes       = prometheus.NewDesc("pctl_topic_stored_bytes", "Bytes stored in the topic's partition streams.", []string{"topic"}, nil)
	descMessages    = prometheus.NewDesc("pctl_topic_stored_messages", "Messages (records and fence markers) stored in the topic's partition streams.", []string{"topic"}, nil)
	descPartLast    = prometheus.NewDesc("pctl_partition_last_sequence", "Last stream sequence of a partition stream (per-partition metrics only).", []string{"topic", "partition"}, nil)
	descPartBytes   = prometheus.NewDesc("pctl_partition_stored_bytes", "Bytes stored in a partition stream (per-partition metrics only).", []string{"topic", "partition"}, nil)
	descPartRec     = prometheus.NewDesc("pctl_partition_epoch_records_total", "Records of the current epoch in a partition (per-partition metrics only).", []string{"topic", "epoch", "partition"}, nil)
	descMembers     = prometheus.NewDesc("pctl_group_members", "Live members of a consumer group.", []string{"topic", "group"}, nil)
	descLag         = prometheus.NewDesc("pctl_group_lag_records", "Records stored after a consumer group's committed positions, all partitions (fence markers not counted).", []string{"topic", "group"}, nil)
	descPartLag     = prometheus.NewDesc("pctl_group_partition_lag_records", "Records stored after a group's committed position in one partition (per-partition metrics only).", []string{"topic", "group", "partition"}, nil)
	descPartPos     = prometheus.NewDesc("pctl_group_partition_position", "A group's committed position (stream sequence) in one partition (per-partition metrics only).", []string{"topic", "group", "partition"}, nil)
	descGated       = prometheus.NewDesc("pctl_group_gate_waits", "Records the group's live members held at the epoch gate since they started (from their heartbeats; drops when a member leaves).", []string{"topic", "group"}, nil)
	descGateWait    = prometheus.NewDesc("pctl_group_gate_wait_seconds", "Total time records of the group's live members waited at the epoch gate since they started (from their heartbeats).", []string{"topic", "group"}, nil)
	descMoved       = prometheus.NewDesc("pctl_group_keys_moved_ratio", "Fraction of keys that changed member at a sticky group's last recorded assignment (spec/protocol.md §6.2.2), under the sticky assignor and under what modulo would have moved.", []string{"topic", "group", "assignor"}, nil)
	descAssignments = prometheus.NewDesc("pctl_group_assignments_total", "Assignments a sticky group has recorded (its record's round).", []string{"topic", "group"}, nil)
	descLeases      = prometheus.NewDesc("pctl_group_lease_changes_total", "Partition owner changes of a group seen between scrapes (acquired, released or taken over).", []string{"topic", "group"}, nil)
	descPlugins     = prometheus.NewDesc("pctl_plugins", "Plugins the broker knows, built-in or uploaded.", []string{"builtin"}, nil)
	descPluginInUse = prometheus.NewDesc("pctl_plugin_topics", "Topics using a plugin in some epoch.", []string{"plugin", "digest"}, nil)
)

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.mu.Lock()
	src := m.source
	m.mu.Unlock()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := src(ctx)
	if err != nil || st == nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(descSnapshot, prometheus.GaugeValue, st.Took.Seconds())
	for i := range st.Topics {
		c.topic(ch, &st.Topics[i])
	}
	plugins := map[bool]int{}
	for _, p := range st.Plugins {
		plugins[p.Builtin]++
		if len(p.UsedBy) > 0 {
			ch <- prometheus.MustNewConstMetric(descPluginInUse, prometheus.GaugeValue, float64(len(p.UsedBy)), p.Name, p.Digest)
		}
	}
	for b, n := range plugins {
		ch <- prometheus.MustNewConstMetric(descPlugins, prometheus.GaugeValue, float64(n), strconv.FormatBool(b))
	}
}

func (c *stateCollector) topic(ch chan<- prometheus.Metric, ts *broker.TopicStatus) {
	m := c.m
	t := &ts.Topic
	name := t.Name
	cur := t.Current()
	ch <- prometheus.MustNewConstMetric(descEpoch, prometheus.GaugeValue, float64(cur.Epoch), name)
	ch <- prometheus.MustNewConstMetric(descPartitions, prometheus.GaugeValue, float64(cur.Partitions), name)
	if chg := t.Change; chg != nil {
		ch <- prometheus.MustNewConstMetric(descChanging, prometheus.GaugeValue, 1, name, strconv.Itoa(chg.To), chg.State)
		ch <- prometheus.MustNewConstMetric(descChangeAge, prometheus.GaugeValue, time.Since(chg.Started).Seconds(), name)
	}
	var bytes, msgs uint64
	for _, s := range ts.Streams {
		bytes += s.Bytes
		msgs += s.Messages
		if m.opts.PerPartition && s.Exists {
			q := strconv.Itoa(s.Partition)
			ch <- prometheus.MustNewConstMetric(descPartLast, prometheus.CounterValue, float64(s.LastSeq), name, q)
			ch <- prometheus.MustNewConstMetric(descPartBytes, prometheus.GaugeValue, float64(s.Bytes), name, q)
		}
	}
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(bytes), name)
	ch <- prometheus.MustNewConstMetric(descMessages, prometheus.GaugeValue, float64(msgs), name)
	last := make([]uint64, len(ts.Streams))
	for q, s := range ts.Streams {
		last[q] = s.LastSeq
	}
	per := EpochRecords(t, last)
	for i, e := range t.Epochs {
		if i < len(t.Epochs)-m.opts.Epochs {
			continue
		}
		total := uint64(0)
		for _, n := range per[i] {
			total += n
		}
		es := strconv.Itoa(e.Epoch)
		ch <- prometheus.MustNewConstMetric(descEpochRec, prometheus.CounterValue, float64(total), name, es)
		if m.opts.PerPartition && i == len(t.Epochs)-1 {
			for q, n := range per[i] {
				ch <- prometheus.MustNewConstMetric(descPartRec, prometheus.CounterValue, float64(n), name, es, strconv.Itoa(q))
			}
		}
	}
	for _, g := range ts.Groups {
		ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(len(g.Members)), name, g.Group)
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(g.Lag), name, g.Group)
		ch <- prometheus.MustNewConstMetric(descGated, prometheus.GaugeValue, float64(g.Gated), name, g.Group)
		ch <- prometheus.MustNewConstMetric(descGateWait, prometheus.GaugeValue, g.GateWait.Seconds(), name, g.Group)
		if m.opts.PerPartition {
			for _, p := range g.Partitions {
				q := strconv.Itoa(p.Partition)
				ch <- prometheus.MustNewConstMetric(descPartLag, prometheus.GaugeValue, float64(p.Lag), name, g.Group, q)
				ch <- prometheus.MustNewConstMetric(descPartPos, prometheus.GaugeValue, float64(p.Position), name, g.Group, q)
			}
		}
		ch <- prometheus.MustNewConstMetric(descLeases, prometheus.CounterValue, m.leaseChanges(t.ID, name, g), name, g.Group)
		if a := g.Assignment; a != nil {
			ch <- prometheus.MustNewConstMetric(descAssignments, prometheus.CounterValue, float64(a.Round), name, g.Group)
			if a.Moved != nil && a.MovedModulo != nil {
				ch <- prometheus.MustNewConstMetric(descMoved, prometheus.GaugeValue, *a.Moved, name, g.Group, wire.AssignorSticky)
				ch <- prometheus.MustNewConstMetric(descMoved, prometheus.GaugeValue, *a.MovedModulo, name, g.Group, wire.AssignorModulo)
			}
		}
	}
}

// leaseChanges counts owner changes of a group's partitions since the last scrape.
func (m *Metrics) leaseChanges(topicID, topic string, g broker.GroupStatus) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]string{topic, g.Group}
	for _, p := range g.Partitions {
		ok := [3]string{topicID, g.Group, strconv.Itoa(p.Partition)}
		prev, seen := m.owners[ok]
		if seen && prev != p.Owner {
			m.leases[k]++
		}
		m.owners[ok] = p.Owner
	}
	return m.leases[k]
}

// EpochRecords returns, for every epoch of t (index as in t.Epochs) and every partition stream q,
// the records stored in q under that epoch, given the streams' last sequences: an ended epoch's
// records in q lie between the previous epoch's fence marker and its own boundary, the current
// epoch's after the last marker (spec/protocol.md §7). Fence markers are not counted.
func EpochRecords(t *wire.Topic, last []uint64) [][]uint64 {
	out := make([][]uint64, len(t.Epochs))
	next := make([]uint64, len(last)) // per stream: the first sequence the next epoch's records can have
	for q := range next {
		next[q] = 1
	}
	for i, e := range t.Epochs {
		out[i] = make([]uint64, e.Partitions)
		ended := len(e.Boundaries) == e.Partitions
		for q := 0; q < e.Partitions && q < len(last); q++ {
			end := last[q]
			if ended {
				end = e.Boundaries[q]
			}
			if end+1 > next[q] {
				out[i][q] = end + 1 - next[q]
			}
			if ended {
				next[q] = max(next[q], e.Boundaries[q]+2) // past the fence marker
			}
		}
	}
	return out
}

var _ prometheus.Collector = (*stateCollector)(nil)
