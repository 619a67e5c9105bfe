// Package wire defines pctl's protocol on NATS (spec/protocol.md): subjects, headers, stream and
// bucket names, the topic descriptor, the broker API's requests and replies, and the error codes
// that cross the wire. The broker and every client use it; it imports neither nats-server nor
// the WebAssembly runtime, so a client stays light.
package wire

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Subjects and names. spec/protocol.md §2 is normative; these are its constants.
const (
	// DataPrefix roots record subjects: pctl.data.<topic>.<epoch>.<partition>.
	DataPrefix = "pctl.data"
	// APIPrefix roots read-only broker requests (producer and consumer roles).
	APIPrefix = "pctl.api"
	// AdminPrefix roots broker requests that change state (admin role only).
	AdminPrefix = "pctl.admin"
	// ProducePrefix roots the broker-side produce service: pctl.produce.<topic>.
	ProducePrefix = "pctl.produce"
	// EventsPrefix roots broker notifications: pctl.events.topic.<topic>.
	EventsPrefix = "pctl.events"

	// TopicsBucket is the KV bucket of topic descriptors (key: topic name).
	TopicsBucket = "pctl-topics"
	// PluginsBucket is the Object Store bucket of plugins (object name: hex digest).
	PluginsBucket = "pctl-plugins"
	// GroupsBucket is the KV bucket of consumer-group state (spec/protocol.md §6).
	GroupsBucket = "pctl-groups"
	// StreamPrefix prefixes partition stream names: PCTL_<topic>_<partition>.
	StreamPrefix = "PCTL_"
)

// Headers of a record message.
const (
	// HeaderKey carries the record's key: "b64:" + standard base64 (so the empty key is "b64:").
	// A record without this header is keyless.
	HeaderKey = "Pctl-Key"
	// HeaderProducer and HeaderSeq identify a record for deduplication and order checks:
	// the producer's id and its sequence number for the record (1, 2, ...).
	HeaderProducer = "Pctl-Producer"
	HeaderSeq      = "Pctl-Seq"
	// HeaderToken is a thin client's per-record deduplication token (spec/protocol.md §5.2).
	HeaderToken = "Pctl-Token"
	// HeaderMsgID is JetStream's deduplication header; pctl sets it to
	// "<producer>-<seq>-<token>" (spec/protocol.md §5.1).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderError carries an API error code on a reply that failed (with a JSON body).
	HeaderError = "Pctl-Error"
	// HeaderKeepalive on an API request asks the broker that takes it for keep-alives until its
	// answer; on a reply it marks a keep-alive, which is not the answer (spec/protocol.md §3).
	HeaderKeepalive = "Pctl-Keepalive"
	// HeaderBroker names, on every reply of the produce service, the broker that answered: a
	// pipelining thin client sends its next requests to ProduceBrokerSubject(topic, that id).
	HeaderBroker = "Pctl-Broker"
	// HeaderPrev, on a produce request pipelined to one broker's subject, is the Pctl-Seq of the
	// request the client sent that broker just before it (spec/protocol.md §5.2): the broker
	// refuses the request (out_of_sequence) when it never accepted that one.
	HeaderPrev = "Pctl-Prev"
	// HeaderFence marks a fence marker: not a record, but the message the broker stores in a
	// partition stream when it fences it (its value: the new epoch). Consumers skip it.
	HeaderFence = "Pctl-Fence"
	// HeaderTombstone marks a tombstone: a record that deletes its key (spec/protocol.md §10.2).
	HeaderTombstone = "Pctl-Tombstone"
	// HeaderBackfill marks a backfilled copy and names its origin: "<epoch>/<partition>/<seq>"
	// (spec/protocol.md §10.3).
	HeaderBackfill = "Pctl-Backfill"
	// HeaderTTL is JetStream's per-message TTL (seconds), set on a compacted topic's tombstones.
	HeaderTTL = "Nats-TTL"
	// HeaderExpectedLastSubjectSeq is JetStream's check of the last sequence of a subject.
	HeaderExpectedLastSubjectSeq = "Nats-Expected-Last-Subject-Sequence"
)

// MaxDirectKeyToken is the longest key encoded directly in a key token (spec/protocol.md §10.1);
// longer keys are encoded by their SHA-256.
const MaxDirectKeyToken = 128

// KeyToken is a compacted topic's subject token for a key: "k" + base64url (no padding) of a key
// of at most MaxDirectKeyToken bytes, else "h" + base64url of its SHA-256.
func KeyToken(key []byte) string {
	if len(key) <= MaxDirectKeyToken {
		return "k" + base64.RawURLEncoding.EncodeToString(key)
	}
	sum := sha256.Sum256(key)
	return "h" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// RecordSubject is the subject of a record of (topic, epoch, partition): with the key's token on a
// topic with key subjects (compact: Topic.KeySubjects, a compacted or backfilled topic).
func RecordSubject(topic string, epoch, partition int, compact bool, key []byte) string {
	s := DataSubject(topic, epoch, partition)
	if compact {
		s += "." + KeyToken(key)
	}
	return s
}

// BatchEndSubject is where a producer publishes the end-of-batch (EOB) commit of a fast batch to
// partition `partition` of epoch `epoch`: the partition subject, or on a topic with key subjects
// (Topic.KeySubjects; whose streams take only six-token subjects) that subject with the token "end", which no key token
// ("k…", "h…") or fence marker ("f…") is. An EOB is never stored (spec/protocol.md §5.1.1).
func BatchEndSubject(topic string, epoch, partition int, compact bool) string {
	s := DataSubject(topic, epoch, partition)
	if compact {
		s += ".end"
	}
	return s
}

// StreamSubject is the subject a partition stream is bound to for an epoch (a pattern with one
// wildcard token on a topic with key subjects, Topic.KeySubjects).
func StreamSubject(topic string, epoch, partition int, compact bool) string {
	return bindSubject(DataSubject(topic, epoch, partition), compact)
}

// StreamRetiredSubject is the subject a partition stream shrunk away is bound to.
func StreamRetiredSubject(topic string, partition int, compact bool) string {
	return bindSubject(RetiredSubject(topic, partition), compact)
}

func bindSubject(s string, compact bool) string {
	if compact {
		return s + ".*"
	}
	return s
}

// MarkerSubject is where a fence marker for the change to epoch `to` is published, given the
// subject the stream was just bound to.
func MarkerSubject(bound string, to int) string {
	if p, ok := strings.CutSuffix(bound, ".*"); ok {
		return p + ".f" + strconv.Itoa(to)
	}
	return bound
}

// SplitRecordSubject splits pctl.data.<topic>.<epoch>.<partition>[.<key token>]; token is ""
// for a five-token subject.
func SplitRecordSubject(s string) (topic string, epoch, partition int, token string, err error) {
	parts := strings.Split(s, ".")
	if (len(parts) != 5 && len(parts) != 6) || parts[0]+"."+parts[1] != DataPrefix {
		return "", 0, 0, "", fmt.Errorf("not a pctl record subject: %q", s)
	}
	e, err1 := strconv.Atoi(parts[3])
	p, err2 := strconv.Atoi(parts[4])
	if err1 != nil || err2 != nil {
		return "", 0, 0, "", fmt.Errorf("not a pctl record subject: %q", s)
	}
	if len(parts) == 6 {
		token = parts[5]
		if token == "" {
			return "", 0, 0, "", fmt.Errorf("not a pctl record subject: %q", s)
		}
	}
	return parts[2], e, p, token, nil
}

// FormatOrigin is the HeaderBackfill value of a copy of the record at (epoch, partition, seq).
func FormatOrigin(epoch, partition int, seq uint64) string {
	return strconv.Itoa(epoch) + "/" + strconv.Itoa(partition) + "/" + strconv.FormatUint(seq, 10)
}

// ParseOrigin parses a HeaderBackfill value.
func ParseOrigin(v string) (epoch, partition int, seq uint64, err error) {
	parts := strings.Split(v, "/")
	if len(parts) == 3 {
		e, err1 := strconv.Atoi(parts[0])
		p, err2 := strconv.Atoi(parts[1])
		s, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && e > 0 && p >= 0 {
			return e, p, s, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("%s header %q is not <epoch>/<partition>/<sequence>", HeaderBackfill, v)
}

// ChangeSubject is where the broker publishes the progress of a topic's epoch change step (JSON
// ChangeEvent, best effort: spec/protocol.md §7).
func ChangeSubject(topic string) string { return EventsPrefix + ".change." + topic }

// BackfillSubject is where the broker publishes a topic's backfill progress (JSON, best effort).
func BackfillSubject(topic string) string { return EventsPrefix + ".backfill." + topic }

var topicRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidTopic checks a topic name: 1 to 64 of [A-Za-z0-9_-] (a NATS subject token and part of a
// stream name, so no dots, spaces or wildcards).
func ValidTopic(name string) error {
	if !topicRE.MatchString(name) {
		return fmt.Errorf("%w: %q: a topic name is 1 to 64 characters of A-Z a-z 0-9 _ -", ErrBadRequest, name)
	}
	return nil
}

// DataSubject is the subject a record of (topic, epoch, partition) is published to.
func DataSubject(topic string, epoch, partition int) string {
	return DataPrefix + "." + topic + "." + strconv.Itoa(epoch) + "." + strconv.Itoa(partition)
}

// RetiredSubject is the only subject of a partition stream that no longer takes records (shrunk
// away): no producer ever publishes to it.
func RetiredSubject(topic string, partition int) string {
	return DataPrefix + "." + topic + ".retired." + strconv.Itoa(partition)
}

// ParseDataSubject splits pctl.data.<topic>.<epoch>.<partition>, also with a compacted topic's
// key token (or a stream binding's wildcard) as a sixth token, which it ignores.
func ParseDataSubject(s string) (topic string, epoch, partition int, err error) {
	parts := strings.Split(s, ".")
	if (len(parts) != 5 && len(parts) != 6) || parts[0]+"."+parts[1] != DataPrefix {
		return "", 0, 0, fmt.Errorf("not a pctl record subject: %q", s)
	}
	e, err1 := strconv.Atoi(parts[3])
	p, err2 := strconv.Atoi(parts[4])
	if err1 != nil || err2 != nil {
		return "", 0, 0, fmt.Errorf("not a pctl record subject: %q", s)
	}
	return parts[2], e, p, nil
}

// StreamName is the JetStream stream holding a topic's partition (across all epochs).
func StreamName(topic string, partition int) string {
	return StreamPrefix + topic + "_" + strconv.Itoa(partition)
}

// ProduceSubject is the broker-side produce service's subject for a topic (any broker answers).
func ProduceSubject(topic string) string { return ProducePrefix + "." + topic }

// ProduceBrokerSubject is the produce service's subject for a topic at one broker (by its id).
func ProduceBrokerSubject(topic, broker string) string {
	return ProducePrefix + "." + topic + "." + broker
}

// ValidBrokerID checks a broker id: 1 to 64 of [A-Za-z0-9].
func ValidBrokerID(id string) bool { return brokerRE.MatchString(id) }

var brokerRE = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)

// TopicEventSubject is where the broker announces a change of a topic's descriptor.
func TopicEventSubject(topic string) string { return EventsPrefix + ".topic." + topic }

// EncodeKey returns the HeaderKey value of a key.
func EncodeKey(key []byte) string { return "b64:" + base64.StdEncoding.EncodeToString(key) }

// DecodeKey parses a HeaderKey value.
func DecodeKey(v string) ([]byte, error) {
	if !strings.HasPrefix(v, "b64:") {
		return nil, fmt.Errorf("%s header %q does not start with b64:", HeaderKey, v)
	}
	return base64.StdEncoding.DecodeString(v[4:])
}

// Error codes that cross the wire (HeaderError and ErrorReply.Code). Each maps to a sentinel, so
// errors.Is works on both sides.
var (
	ErrBadRequest       = errors.New("bad request")
	ErrNotFound         = errors.New("not found")
	ErrExists           = errors.New("already exists")
	ErrConflict         = errors.New("conflict")
	ErrInUse            = errors.New("in use")
	ErrPluginRejected   = errors.New("plugin rejected")
	ErrPluginFailed     = errors.New("plugin failed")
	ErrFenced           = errors.New("epoch fenced")
	ErrChangeInProgress = errors.New("epoch change in progress")
	ErrPermission       = errors.New("permission denied")
	ErrUnavailable      = errors.New("unavailable")
	// ErrOutOfSequence: the produce service refused a request because one before it (same
	// producer) never arrived, or because it does not know the producer on its own subject
	// (spec/protocol.md §5.2): re-send every unacknowledged record in order.
	ErrOutOfSequence = errors.New("out of sequence")
	ErrInternal      = errors.New("internal error")
	// ErrUnsupported: the request or the group needs something this implementation does not
	// have, for example a consumer group whose assignor it does not implement (§6.1).
	ErrUnsupported = errors.New("unsupported")
)

// ErrMsgIDInProcess marks a record whose Nats-Msg-Id JetStream kept refusing as "duplicate
// message id is in process" (API error 10158, spec/protocol.md §5.1.5): the producer stopped
// re-sending it, and its fate is unknown (it may be stored). It is not a wire code of its own: it
// crosses the wire as code "unavailable" with an InProcessDetail (§3), and a *RemoteError with
// that detail matches it (errors.Is), as it matches ErrUnavailable. Such a record MUST NOT be
// re-sent under the same identity (§5.2): read its partition before producing it again.
var ErrMsgIDInProcess = errors.New("JetStream keeps answering 'duplicate message id is in process' (10158)")

// InProcessDetail is the detail of an "unavailable" error reply (or a batched record's error)
// for a record whose Nats-Msg-Id is stuck "in process" (spec/protocol.md §3, §5.1.5, §5.2).
type InProcessDetail struct {
	InProcess bool   `json:"in_process"`
	Partition int    `json:"partition"`
	Epoch     int    `json:"epoch"`
	MsgID     string `json:"msg_id,omitempty"`
}

// ErrTopicCreating marks the "unavailable" answer for a topic whose creation has not finished
// (spec/protocol.md §3): it crosses the wire as code "unavailable" with a CreatingDetail, and a
// *RemoteError with that detail matches it (errors.Is), as it matches ErrUnavailable. Clients
// that wait for a new topic decide by it, not by the message's words.
var ErrTopicCreating = errors.New("topic is being created")

// CreatingDetail is the detail of an "unavailable" error reply for a topic being created
// (spec/protocol.md §3).
type CreatingDetail struct {
	Creating bool   `json:"creating"`
	Topic    string `json:"topic"`
}

// TopicCreatingError is the error for a topic being created (spec/protocol.md §3): it matches
// ErrUnavailable and ErrTopicCreating, and its Detail is what the broker's reply carries.
type TopicCreatingError struct {
	Topic string
}

func (e *TopicCreatingError) Error() string {
	return fmt.Sprintf("%v: topic %s is being created; retry in a moment", ErrUnavailable, e.Topic)
}

// Unwrap gives the two sentinels the error matches.
func (e *TopicCreatingError) Unwrap() []error { return []error{ErrUnavailable, ErrTopicCreating} }

// Detail is the error's reply detail.
func (e *TopicCreatingError) Detail() CreatingDetail {
	return CreatingDetail{Creating: true, Topic: e.Topic}
}

// ErrRecordTooLarge marks a record refused for its size: larger than the server's max_payload or
// the stream's maximum message size (JetStream error 10054). It is not a wire code of its own: it
// crosses the wire as code "bad_request" with the detail {"too_large": true} (spec/protocol.md §3),
// and a *RemoteError with that detail matches it (errors.Is), as it matches ErrBadRequest.
var ErrRecordTooLarge = errors.New("record too large")

// TooLargeDetail is the detail of a "bad_request" failure of a record refused for its size
// (spec/protocol.md §3): Limit is the limit it is over, LimitMaxPayload or LimitMaxMsgSize.
type TooLargeDetail struct {
	TooLarge bool   `json:"too_large"`
	Limit    string `json:"limit,omitempty"`
}

// The limits a record can be too large for (TooLargeDetail.Limit).
const (
	LimitMaxPayload = "max_payload"  // the NATS server's largest message
	LimitMaxMsgSize = "max_msg_size" // the partition stream's largest message (JetStream error 10054)
)

// TooLargeError is a record's refusal for its size: it matches ErrBadRequest and
// ErrRecordTooLarge, and says which limit (LimitMaxPayload or LimitMaxMsgSize).
type TooLargeError struct {
	Limit string
	Msg   string // what was refused, and what to do
}

// TooLarge is the error of a record refused for its size (limit: LimitMaxPayload or
// LimitMaxMsgSize; msg says what and what to do).
func TooLarge(limit, msg string) error { return &TooLargeError{Limit: limit, Msg: msg} }

func (e *TooLargeError) Error() string   { return ErrBadRequest.Error() + ": " + e.Msg }
func (e *TooLargeError) Unwrap() []error { return []error{ErrBadRequest, ErrRecordTooLarge} }

// Detail is the error's reply detail.
func (e *TooLargeError) Detail() TooLargeDetail {
	return TooLargeDetail{TooLarge: true, Limit: e.Limit}
}

// TooLargeLimit is the limit a record refused for its size was over (LimitMaxPayload or
// LimitMaxMsgSize; "" when the error does not say), and whether err is such a refusal at all: a
// *TooLargeError, or a *RemoteError with the too_large detail (spec/protocol.md §3).
func TooLargeLimit(err error) (string, bool) {
	var te *TooLargeError
	if errors.As(err, &te) {
		return te.Limit, true
	}
	var re *RemoteError
	var d TooLargeDetail
	if errors.As(err, &re) && re.detail("bad_request", &d) && d.TooLarge {
		return d.Limit, true
	}
	return "", false
}

// codeTable lists every code with its sentinel, most specific first. Code takes the first entry
// an error wraps, so an error that wraps two sentinels (errors.Join, or a fence reported as a bad
// request) gets the same code every time: a fence before a generic refusal, a refusal before
// unavailable, internal last.
var codeTable = []struct {
	code string
	err  error
}{
	{"fenced", ErrFenced},
	{"change_in_progress", ErrChangeInProgress},
	{"out_of_sequence", ErrOutOfSequence},
	{"plugin_rejected", ErrPluginRejected},
	{"plugin_failed", ErrPluginFailed},
	{"permission", ErrPermission},
	{"not_found", ErrNotFound},
	{"exists", ErrExists},
	{"conflict", ErrConflict},
	{"in_use", ErrInUse},
	{"unsupported", ErrUnsupported},
	{"bad_request", ErrBadRequest},
	{"unavailable", ErrUnavailable},
	{"internal", ErrInternal},
}

// codes maps a code back to its sentinel (RemoteError.Unwrap).
var codes = func() map[string]error {
	m := make(map[string]error, len(codeTable))
	for _, c := range codeTable {
		m[c.code] = c.err
	}
	return m
}()

// Code returns the wire code of an error: that of the first sentinel of the table above that it
// wraps (deterministic when it wraps several), "internal" when it wraps none.
func Code(err error) string {
	for _, c := range codeTable {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "internal"
}

// ErrorReply is the body of a failed API reply.
type ErrorReply struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail,omitempty"` // e.g. a conformance report
}

// RemoteError is an error returned by the broker. It unwraps to the sentinel of its code.
type RemoteError struct {
	Code    string
	Message string
	Detail  []byte // raw JSON detail, if any
}

func (e *RemoteError) Error() string { return e.Message }

// Unwrap maps the code back to its sentinel.
func (e *RemoteError) Unwrap() error {
	if s, ok := codes[e.Code]; ok {
		return s
	}
	return ErrInternal
}

// Is reports whether the error is ErrMsgIDInProcess (an "unavailable" error whose detail has
// "in_process": true), ErrTopicCreating (one whose detail has "creating": true) or
// ErrRecordTooLarge (a "bad_request" whose detail has "too_large": true), spec/protocol.md §3.
// Other sentinels are matched through Unwrap.
func (e *RemoteError) Is(target error) bool {
	switch target {
	case ErrMsgIDInProcess:
		_, ok := e.InProcess()
		return ok
	case ErrTopicCreating:
		var d CreatingDetail
		return e.detail("unavailable", &d) && d.Creating
	case ErrRecordTooLarge:
		_, ok := TooLargeLimit(e)
		return ok
	}
	return false
}

// detail decodes the error's detail into v when the error has that code and a detail that
// decodes: each detail of spec/protocol.md §3 belongs to one code.
func (e *RemoteError) detail(code string, v any) bool {
	return e.Code == code && len(e.Detail) > 0 && json.Unmarshal(e.Detail, v) == nil
}

// InProcess returns the error's in-process detail, and whether it has one: an "unavailable"
// error for a record whose Nats-Msg-Id is stuck (spec/protocol.md §3, §5.1.5).
func (e *RemoteError) InProcess() (InProcessDetail, bool) {
	var d InProcessDetail
	if !e.detail("unavailable", &d) || !d.InProcess {
		return InProcessDetail{}, false
	}
	return d, true
}

// Remote is the *RemoteError of an error reply as a client decoded it (a batched record's
// error, spec/protocol.md §5.2): its code, message and detail (re-encoded as raw JSON).
func (r *ErrorReply) Remote() *RemoteError {
	e := &RemoteError{Code: r.Code, Message: r.Message}
	if e.Message == "" {
		e.Message = "the produce service refused the record (" + r.Code + ")"
	}
	switch d := r.Detail.(type) {
	case nil:
	case json.RawMessage:
		e.Detail = d
	default:
		e.Detail, _ = json.Marshal(d)
	}
	return e
}

// RoleHint says, for a subject a client was refused, which role it needs.
func RoleHint(subject string) string {
	switch {
	case strings.HasPrefix(subject, AdminPrefix):
		return "this needs the admin role (connect with the broker's admin.nk)"
	case strings.HasPrefix(subject, DataPrefix), strings.HasPrefix(subject, ProducePrefix):
		return "producing needs the producer or admin role (producer.nk)"
	case strings.HasPrefix(subject, "$KV."+GroupsBucket), strings.HasPrefix(subject, "$JS.API.CONSUMER"):
		return "consuming needs the consumer or admin role (consumer.nk)"
	}
	return "check the role of the credentials you connect with"
}
