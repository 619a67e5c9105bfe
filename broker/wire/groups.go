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
//	<topic id>.<group>.g.assignor     AssignorState, created once before g.created (§6.1)
//	<topic id>.<group>.g.assignment   Assignment, the sticky assignor's record (§6.2.1)
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

// AssignorKey is the key of a group's assignor (spec/protocol.md §6.1).
func AssignorKey(topicID, group string) string { return topicID + "." + group + ".g.assignor" }

// AssignmentKey is the key of a sticky group's recorded assignment (spec/protocol.md §6.2.1).
func AssignmentKey(topicID, group string) string { return topicID + "." + group + ".g.assignment" }

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

// Assignors (spec/protocol.md §6.1): the rule that maps a group's partitions to its members.
const (
	// AssignorModulo gives the i-th assignable partition to member i mod M (the default, and
	// what a group without an AssignorKey uses).
	AssignorModulo = "modulo"
	// AssignorSticky keeps keys with the member that holds their state (§6.2.1).
	AssignorSticky = "sticky"
)

// AssignorState is the value of AssignorKey.
type AssignorState struct {
	Assignor string `json:"assignor"`
}

// Assignment is a sticky group's recorded assignment (spec/protocol.md §6.2.1): Owners[j] is the
// index in Members of the member that should read Partitions[j].
type Assignment struct {
	Assignor   string   `json:"assignor"`
	Round      int64    `json:"round"`
	Epoch      int      `json:"epoch"`
	Members    []string `json:"members"`
	Partitions []int    `json:"partitions"`
	Owners     []int    `json:"owners"`
	// Moved and MovedModulo are the fractions of the key sample that changed member from the
	// previous record (under this assignor and under modulo, §6.2.2); nil for the first record.
	Moved       *float64            `json:"moved,omitempty"`
	MovedModulo *float64            `json:"moved_modulo,omitempty"`
	At          string              `json:"at,omitempty"` // RFC 3339
	History     []AssignmentSummary `json:"history,omitempty"`
}

// AssignmentSummary is one recorded assignment, as History keeps it.
type AssignmentSummary struct {
	Round       int64    `json:"round"`
	Epoch       int      `json:"epoch"`
	Members     int      `json:"members"`
	Partitions  int      `json:"partitions"`
	Moved       *float64 `json:"moved,omitempty"`
	MovedModulo *float64 `json:"moved_modulo,omitempty"`
	At          string   `json:"at,omitempty"`
}

// Owner returns the member the assignment gives partition q, or "".
func (a *Assignment) Owner(q int) string {
	if a == nil {
		return ""
	}
	for j, p := range a.Partitions {
		if p == q && j < len(a.Owners) && a.Owners[j] >= 0 && a.Owners[j] < len(a.Members) {
			return a.Members[a.Owners[j]]
		}
	}
	return ""
}
