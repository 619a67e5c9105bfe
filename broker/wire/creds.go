package wire

import "time"

// Scoped credentials (spec/protocol.md §8): the admin API that lets the broker know them.
const (
	AdminCredsAdd    = AdminPrefix + ".creds.add"    // CredsRequest -> CredsReply
	AdminCredsList   = AdminPrefix + ".creds.list"   // {} -> CredsListReply
	AdminCredsRevoke = AdminPrefix + ".creds.revoke" // CredsRequest (NKey only) -> CredsReply
)

// Credential is a user limited to one topic and, for a consumer, one group. The topic id binds
// it to one creation of the topic: a topic deleted and created again needs new credentials.
type Credential struct {
	NKey    string    `json:"nkey"` // public key (U...)
	Role    string    `json:"role"` // "producer" or "consumer"
	Topic   string    `json:"topic"`
	TopicID string    `json:"topic_id"`
	Group   string    `json:"group,omitempty"` // consumers only
	Name    string    `json:"name,omitempty"`  // a label for people
	Created time.Time `json:"created"`
	// Partitions is how many of the topic's partition streams the permissions name (a
	// producer's direct gets name a stream); the embedded broker raises it when the topic grows.
	Partitions int `json:"partitions"`
}

// CredsRequest asks the broker to let a scoped user in (the client made the key pair and sends
// only the public key), or to revoke one (NKey only).
type CredsRequest struct {
	NKey  string `json:"nkey"`
	Role  string `json:"role,omitempty"`
	Topic string `json:"topic,omitempty"`
	Group string `json:"group,omitempty"`
	Name  string `json:"name,omitempty"`
}

// CredsReply describes the user. Applied: the broker's embedded server lets it in now (or, for a
// revoke, no longer); false with an external NATS server, whose operator adds Config (the user's
// entry for the authorization users list) to every node's configuration and reloads it.
type CredsReply struct {
	User    Credential `json:"user"`
	Applied bool       `json:"applied"`
	Config  string     `json:"config"`
}

// CredsListReply lists the scoped users an embedded broker knows.
type CredsListReply struct {
	Users []Credential `json:"users"`
}

// InboxPrefix is the reply-subject prefix of the NATS user whose public NKey is pub
// (spec/protocol.md §8). Scoped users may subscribe to their own inbox only; pctl's Go client
// uses it for every NKey user.
func InboxPrefix(pub string) string { return "_INBOX_" + pub }
