package wire

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Consumer-group state lives in GroupsBucket (spec/protocol.md §6). Keys:
//
//	<topic id>.<group>.m.<member>     MemberState, re-put every heartbeat
//	<topic id>.<group>.p.<partition>  PartitionState, changed only by compare-and-set
//	<topic id>.<group>.g.created      creation time (RFC 3339)
//	<topic id>.<group>.g.reset        ResetState, changed only by compare-and-set (§6.6)
//
// The topic id (not its name) scopes the state, so a topic deleted and created again under the
// same name starts with fresh positions.

// MemberKey is the key of a member's heartbeat.
func MemberKey(topicID, group, member string) string {
	return topicID + "." + group + ".m." + member
}

// PartitionKey is the key of a group's state for one partition stream.
func PartitionKey(topicID, group string, partition int) string {
	return topicID + "." + group + ".p." + strconv.Itoa(partition)
}

// ResetKey is the key of a group's last reset (spec/protocol.md §6.6).
func ResetKey(topicID, group string) string { return topicID + "." + group + ".g.reset" }

// StartKey is the key of a group's start (spec/protocol.md §10.5): written by the creator of a
// group that reads the current epoch alone.
func StartKey(topicID, group string) string { return topicID + "." + group + ".g.start" }

// GroupStart is a group's start: From "current-epoch" at Epoch.
type GroupStart struct {
	From  string `json:"from"`
	Epoch int    `json:"epoch"`
}

// GroupPrefix is the key prefix of a group's state.
func GroupPrefix(topicID, group string) string { return topicID + "." + group + "." }

// ParseGroupKey splits a group key into group, kind ("m" or "p") and name.
func ParseGroupKey(topicID, key string) (group, kind, name string, ok bool) {
	if !strings.HasPrefix(key, topicID+".") {
		return "", "", "", false
	}
	parts := strings.Split(key[len(topicID)+1:], ".")
	if len(parts) != 3 || (parts[1] != "m" && parts[1] != "p") {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// MemberState is a member's heartbeat.
type MemberState struct {
	ID        string    `json:"id"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// Partitions the member currently owns (informational).
	Owns []int `json:"owns,omitempty"`
	// Gated and GateWaitMS count, since the member started, the records it held at the epoch gate
	// (spec/protocol.md §6.5) and their total wait in milliseconds (informational: status pages).
	Gated      int64 `json:"gated,omitempty"`
	GateWaitMS int64 `json:"gate_wait_ms,omitempty"`
}

// PartitionState is a group's state for one partition stream: who owns it, until when, and the
// committed position (the stream sequence of the last record the group acknowledged; every record
// up to it is drained).
type PartitionState struct {
	Owner    string `json:"owner,omitempty"`
	LeaseEnd int64  `json:"lease_end,omitempty"` // unix milliseconds
	Position uint64 `json:"position"`
	// Generation is the group generation (number of resets, spec/protocol.md §6.6) the state was
	// written under; absent: 0.
	Generation uint64 `json:"generation,omitempty"`
}

// ResetState is a group's last reset (spec/protocol.md §6.6): writing it is the reset's commit
// point. Positions[q] is where partition stream q starts at Generation.
type ResetState struct {
	Generation uint64   `json:"generation"`
	To         string   `json:"to"`             // "beginning", "end" or "time"
	Time       int64    `json:"time,omitempty"` // unix milliseconds, for "time"
	Positions  []uint64 `json:"positions"`
	By         string   `json:"by,omitempty"`
	At         string   `json:"at,omitempty"` // RFC 3339
}

// ValidGroup checks a group name (same rules as a topic name).
func ValidGroup(name string) error { return ValidName("group name", name) }

// ValidName checks a group name, member id or producer id: the rules of a topic name; the error
// calls it what (for example "member id").
func ValidName(what, name string) error {
	if !topicRE.MatchString(name) {
		return fmt.Errorf("%w: %q: a %s is 1 to 64 characters of A-Z a-z 0-9 _ -", ErrBadRequest, name, what)
	}
	return nil
}
