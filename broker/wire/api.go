package wire

// Broker API subjects (request/reply, JSON bodies). spec/protocol.md §3.
const (
	APITopicGet    = APIPrefix + ".topic.get"   // TopicRequest -> TopicReply
	APITopicList   = APIPrefix + ".topic.list"  // {} -> TopicListReply
	APIPluginGet   = APIPrefix + ".plugin.get"  // PluginRequest -> raw module bytes (headers: Pctl-Digest)
	APIPluginInfo  = APIPrefix + ".plugin.info" // PluginRequest -> PluginInfo
	APIPluginList  = APIPrefix + ".plugin.list" // {} -> PluginListReply
	APIGroupList   = APIPrefix + ".group.list"  // TopicRequest -> GroupListReply
	AdminPluginPut = AdminPrefix + ".plugin.upload"
	AdminPluginDel = AdminPrefix + ".plugin.delete"
	AdminTopicNew  = AdminPrefix + ".topic.create"
	AdminTopicDel  = AdminPrefix + ".topic.delete"
	AdminTopicEdit = AdminPrefix + ".topic.repartition"
	AdminTopicSet  = AdminPrefix + ".topic.set" // SetTopicRequest -> TopicReply
	// AdminTopicRetire deletes old epochs' records (spec/protocol.md §10.7): RetireRequest ->
	// TopicReply.
	AdminTopicRetire = AdminPrefix + ".topic.retire"
)

// RetireRequest deletes the records of epochs <= Through (0: every ended epoch).
type RetireRequest struct {
	Topic   string `json:"topic"`
	Through int    `json:"through,omitempty"`
}

// TopicRequest names a topic.
type TopicRequest struct {
	Topic string `json:"topic"`
}

// TopicReply carries a descriptor and its KV revision.
type TopicReply struct {
	Topic    Topic  `json:"topic"`
	Revision uint64 `json:"revision"`
}

// TopicListReply lists topics.
type TopicListReply struct {
	Topics []TopicSummary `json:"topics"`
}

// TopicSummary is one line of a topic list.
type TopicSummary struct {
	Name        string `json:"name"`
	Epoch       int    `json:"epoch"`
	Partitions  int    `json:"partitions"`
	Partitioner string `json:"partitioner"`
	Changing    bool   `json:"changing,omitempty"`
}

// CreateTopicRequest creates a topic.
type CreateTopicRequest struct {
	Topic       string `json:"topic"`
	Partitions  int    `json:"partitions"`
	Partitioner string `json:"partitioner"` // built-in name or hex digest of an uploaded plugin
	Config      []byte `json:"config,omitempty"`
	// Replicas of every partition stream (1 to 5); 0: the broker's default.
	Replicas int `json:"replicas,omitempty"`
	// PlacementTags place every partition stream on servers with all these tags.
	PlacementTags []string `json:"placement_tags,omitempty"`
	// Compact makes a compacted topic (spec/protocol.md §10); DeleteRetentionMS is how long its
	// tombstones are kept (0: DefaultDeleteRetentionMS).
	Compact           bool  `json:"compact,omitempty"`
	DeleteRetentionMS int64 `json:"delete_retention_ms,omitempty"`
	// Backfill makes a plain topic backfill at epoch changes (copy its history).
	Backfill bool `json:"backfill,omitempty"`
}

// DefaultDeleteRetentionMS is a compacted topic's default tombstone retention (24 h, Kafka's
// delete.retention.ms).
const DefaultDeleteRetentionMS = 24 * 60 * 60 * 1000

// SetTopicRequest changes a live topic's replicas and/or placement tags: every partition stream
// is updated (JetStream moves or adds replicas while records flow). Zero Replicas keeps them;
// SetPlacement replaces the placement tags (an empty list removes them).
type SetTopicRequest struct {
	Topic         string   `json:"topic"`
	Replicas      int      `json:"replicas,omitempty"`
	PlacementTags []string `json:"placement_tags,omitempty"`
	SetPlacement  bool     `json:"set_placement,omitempty"`
}

// RepartitionRequest starts an epoch change. Zero Partitions or empty Partitioner keep the
// current one.
type RepartitionRequest struct {
	Topic       string `json:"topic"`
	Partitions  int    `json:"partitions,omitempty"`
	Partitioner string `json:"partitioner,omitempty"`
	Config      []byte `json:"config,omitempty"`
	SetConfig   bool   `json:"set_config,omitempty"` // Config replaces the current config even when empty
}

// PluginRequest names a plugin by digest (or built-in name).
type PluginRequest struct {
	Plugin string `json:"plugin"`
}

// PluginInfo describes a stored plugin.
type PluginInfo struct {
	Digest     string   `json:"digest"`
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Size       int      `json:"size"`
	Profile    string   `json:"profile"`
	Properties []string `json:"properties,omitempty"`
	Builtin    bool     `json:"builtin,omitempty"`
	// AncestryVerified is true when conformance verified the plugin's declared ancestry.
	AncestryVerified bool     `json:"ancestry_verified,omitempty"`
	UsedBy           []string `json:"used_by,omitempty"`
}

// PluginListReply lists plugins.
type PluginListReply struct {
	Plugins []PluginInfo `json:"plugins"`
}

// ProduceReply answers one broker-side produce request.
type ProduceReply struct {
	Partition int    `json:"partition"`
	Epoch     int    `json:"epoch"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// Broker is the id of the broker that stored the record (also in header Pctl-Broker): a
	// pipelining thin client sends its next requests to ProduceBrokerSubject(topic, Broker).
	Broker string `json:"broker,omitempty"`
}

// GroupListReply lists consumer groups of a topic with their committed positions.
type GroupListReply struct {
	Groups []GroupInfo `json:"groups"`
}

// GroupInfo is a group's state on a topic.
type GroupInfo struct {
	Group     string   `json:"group"`
	Members   []string `json:"members"`
	Positions []uint64 `json:"positions"` // committed stream sequence per partition stream
	// Assignor is the group's assignor (spec/protocol.md §6.1; "modulo" when it has no key);
	// Assignments, for a sticky group, the summaries of its last recorded assignments, oldest
	// first (§6.2.1), with the fractions of keys that changed member (§6.2.2).
	Assignor    string              `json:"assignor,omitempty"`
	Assignments []AssignmentSummary `json:"assignments,omitempty"`
}

// ChangeEvent is the progress of an epoch change's step over partitions, published on
// ChangeSubject about twice a second while the step runs, and once when it ends (best effort).
type ChangeEvent struct {
	Topic  string `json:"topic"`
	To     int    `json:"to"`     // the epoch being created
	Step   string `json:"step"`   // "create" or "fence"
	Done   int    `json:"done"`   // partitions of the step done so far
	Of     int    `json:"of"`     // partitions the step works on
	Broker string `json:"broker"` // the broker running it
}

// BackfillEvent is a backfill's progress, published on BackfillSubject (best effort).
type BackfillEvent struct {
	Topic          string `json:"topic"`
	Epoch          int    `json:"epoch"`
	DonePartitions int    `json:"done_partitions"`
	Partitions     int    `json:"partitions"`
	Copied         int64  `json:"copied"`
	Newer          int64  `json:"newer"`
	Expired        int64  `json:"expired"`
	State          string `json:"state"`
}
