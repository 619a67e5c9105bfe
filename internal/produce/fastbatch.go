package produce

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// This file is the wire format of JetStream fast batches (nats-server 2.14+), as spec/protocol.md
// §5.1.1 pins it: the reply subject that makes a publish part of a batch, and the replies the
// stream leader sends back. It holds no state; the sink (sink.go) owns the protocol.

// Fast-batch operations, the <op> token of the reply subject.
const (
	fbStart  = 0 // first message of a batch (batch seq 1), stored
	fbAppend = 1 // a further message, stored
	fbCommit = 2 // a message that is stored and commits the batch
	fbEOB    = 3 // end-of-batch commit: no data, not stored, batch seq one above the last
	fbPing   = 4
)

// JetStream API error codes the producer acts on (spec/protocol.md §5.1.1).
const (
	errCodeTooLarge      = 10054 // message size exceeds maximum allowed
	errCodeDupConflict   = 10071 // wrong last sequence (pctl's batches carry no expected sequence)
	errCodeBatchDisabled = 10205 // batch publish is disabled on the stream
	errCodeBadPattern    = 10206 // batch publish pattern is invalid
	errCodeBadBatchID    = 10207
	errCodeUnknownBatch  = 10208 // batch closed, expired or never started
	errCodeTooManyOpen   = 10211 // too many batches open on the stream or server
)

// fbReplySubject is the reply subject of one message of a fast batch: the server parses the
// batch from it (gap mode is always "fail").
func fbReplySubject(inbox, batch string, flow int, seq uint64, op int) string {
	var b strings.Builder
	b.Grow(len(inbox) + len(batch) + 40)
	b.WriteString(inbox)
	b.WriteByte('.')
	b.WriteString(batch)
	b.WriteByte('.')
	b.WriteString(strconv.Itoa(flow))
	b.WriteString(".fail.")
	b.WriteString(strconv.FormatUint(seq, 10))
	b.WriteByte('.')
	b.WriteString(strconv.Itoa(op))
	b.WriteString(".$FI")
	return b.String()
}

// parseFBSubject splits a reply subject made by fbReplySubject under inbox.
func parseFBSubject(inbox, subject string) (batch string, seq uint64, op int, ok bool) {
	rest, found := strings.CutPrefix(subject, inbox+".")
	if !found {
		return "", 0, 0, false
	}
	rest, found = strings.CutSuffix(rest, ".$FI")
	if !found {
		return "", 0, 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 5 || parts[2] != "fail" {
		return "", 0, 0, false
	}
	seq, err := strconv.ParseUint(parts[3], 10, 64)
	if err != nil {
		return "", 0, 0, false
	}
	op, err = strconv.Atoi(parts[4])
	if err != nil {
		return "", 0, 0, false
	}
	return parts[0], seq, op, true
}

type replyKind int

const (
	replyFlowAck      replyKind = iota // {"type":"ack","seq":S,"msgs":M}: batch seqs 1..S persisted
	replyGap                           // {"type":"gap","last_seq":E,"seq":C}: the batch ends
	replyFlowErr                       // {"type":"err","seq":C,"error":{...}}: the batch ends
	replyPubAck                        // the batch is closed; Count messages persisted
	replyRefusal                       // an error PubAck: the message was refused
	replyNoResponders                  // status 503: no stream on the subject
	replyGarbage                       // anything else (never trusted)
)

func (k replyKind) String() string {
	return [...]string{"flow ack", "gap", "error", "PubAck", "refusal", "no responders", "unparsable reply"}[k]
}

// fbReply is one server reply about a message of a fast batch.
type fbReply struct {
	batch string // batch id, from the subject
	seq   uint64 // batch seq of the message the reply is about, from the subject
	op    int
	kind  replyKind

	ackSeq      uint64 // flow ack: persisted up to here
	gapExpected uint64 // gap: the batch seq the server expected
	gapGot      uint64 // gap: the batch seq it got
	errCode     int    // flow error or refusal: JetStream API error code
	errText     string
	stream      string // PubAck
	streamSeq   uint64 // PubAck: stream sequence of the last message the batch stored
	count       uint64 // PubAck: batch seqs 1..count persisted
	ackBatch    string // PubAck: the batch id the server names
	duplicate   bool   // PubAck of a one-message batch that was a duplicate
}

// parseFBReply decodes a server reply; m's subject was split already.
func parseFBReply(m *nats.Msg, batch string, seq uint64, op int) fbReply {
	r := fbReply{batch: batch, seq: seq, op: op, kind: replyGarbage}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		r.kind = replyNoResponders
		return r
	}
	var body struct {
		Type      string `json:"type"`
		Seq       uint64 `json:"seq"`
		Msgs      int    `json:"msgs"`
		LastSeq   uint64 `json:"last_seq"`
		Stream    string `json:"stream"`
		Batch     string `json:"batch"`
		Count     uint64 `json:"count"`
		Duplicate bool   `json:"duplicate"`
		Error     *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &body); err != nil {
		r.errText = "unparsable reply: " + err.Error()
		return r
	}
	switch {
	case body.Type == "ack":
		r.kind, r.ackSeq = replyFlowAck, body.Seq
	case body.Type == "gap":
		r.kind, r.gapExpected, r.gapGot = replyGap, body.LastSeq, body.Seq
	case body.Type == "err":
		r.kind = replyFlowErr
		if body.Error != nil {
			r.errCode, r.errText = body.Error.ErrCode, body.Error.Description
		}
		r.gapGot = body.Seq
	case body.Type != "":
		r.errText = "unknown reply type " + strconv.Quote(body.Type)
	case body.Error != nil:
		r.kind, r.errCode, r.errText, r.stream = replyRefusal, body.Error.ErrCode, body.Error.Description, body.Stream
	case body.Stream != "":
		r.kind, r.stream, r.streamSeq, r.count, r.ackBatch, r.duplicate = replyPubAck, body.Stream, body.Seq, body.Count, body.Batch, body.Duplicate
	default:
		r.errText = "reply without type, error or stream"
	}
	return r
}

// randomHex returns n random bytes from crypto/rand as 2n lowercase hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// NewToken is a record's random token (spec/protocol.md §5.1: 32 lowercase hex digits).
func NewToken() string { return randomHex(16) }

// RecordToken is the token the produce service uses for a thin client's record that came without
// one (spec/protocol.md §5.2): the first 32 hex digits of SHA-256 over "pctl-record-v1", a zero
// byte, then "k" + the 4-byte big-endian key length + the key (or "n" for a keyless record),
// then the value. Retries of the same request get the same token, so they are deduplicated.
func RecordToken(key []byte, noKey bool, value []byte) string {
	h := sha256.New()
	h.Write([]byte("pctl-record-v1\x00"))
	if noKey {
		h.Write([]byte{'n'})
	} else {
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(key)))
		h.Write([]byte{'k'})
		h.Write(l[:])
		h.Write(key)
	}
	h.Write(value)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// sameRecord reports whether a stored message is the record with these headers and value:
// producer, sequence, deduplication id and key header for header, value byte for byte. It is how
// a producer proves that a duplicate acknowledgement (or a record found by a search) is its own
// record and not a look-alike (spec/protocol.md §5.1.2).
func sameRecord(m *jetstream.RawStreamMsg, hdr nats.Header, value []byte) bool {
	if m == nil || m.Header.Get(wire.HeaderFence) != "" {
		return false
	}
	for _, h := range []string{wire.HeaderProducer, wire.HeaderSeq, wire.HeaderMsgID} {
		if m.Header.Get(h) != hdr.Get(h) {
			return false
		}
	}
	if len(m.Header.Values(wire.HeaderKey)) != len(hdr.Values(wire.HeaderKey)) || m.Header.Get(wire.HeaderKey) != hdr.Get(wire.HeaderKey) {
		return false
	}
	return bytes.Equal(m.Data, value)
}

// leaderGet reads message seq of a stream with $JS.API.STREAM.MSG.GET, which the stream leader
// answers (a direct get may come from a replica that lags behind). A missing message is
// jetstream.ErrMsgNotFound, a missing stream jetstream.ErrStreamNotFound.
func leaderGet(ctx context.Context, c *Conn, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return leaderRequest(ctx, c, stream, fmt.Sprintf("message %d", seq), `{"seq":`+strconv.FormatUint(seq, 10)+`}`)
}

// leaderLast reads the stream's last message from the stream leader (STREAM.MSG.GET with
// last_by_subj ">"): jetstream.ErrMsgNotFound when the stream is empty or its last message is
// gone (deleted or expired).
func leaderLast(ctx context.Context, c *Conn, stream string) (*jetstream.RawStreamMsg, error) {
	return leaderRequest(ctx, c, stream, "the last message", `{"last_by_subj":">"}`)
}

// leaderNext reads the stream's first message at or after sequence from, from the stream leader
// (STREAM.MSG.GET with next_by_subj ">"): jetstream.ErrMsgNotFound when there is none.
func leaderNext(ctx context.Context, c *Conn, stream string, from uint64) (*jetstream.RawStreamMsg, error) {
	return leaderRequest(ctx, c, stream, fmt.Sprintf("the first message from %d", from), `{"seq":`+strconv.FormatUint(from, 10)+`,"next_by_subj":">"}`)
}

// leaderRequest sends one STREAM.MSG.GET request (body) and decodes the message it returns; what
// names the message asked for in errors.
func leaderRequest(ctx context.Context, c *Conn, stream, what, body string) (*jetstream.RawStreamMsg, error) {
	// The acknowledgement timeout, but at least a second: a read is not an acknowledgement, and
	// with a timeout of a few milliseconds it may never be answered in time under load.
	ctx, cancel := context.WithTimeout(ctx, max(c.AckTimeout, time.Second))
	defer cancel()
	m, err := c.NC.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, []byte(body))
	if err != nil {
		return nil, err
	}
	var resp struct {
		Message *struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("%s of %s: %w", what, stream, err)
	}
	if resp.Error != nil {
		switch resp.Error.ErrCode {
		case 10037:
			return nil, jetstream.ErrMsgNotFound
		case 10059:
			return nil, jetstream.ErrStreamNotFound
		}
		return nil, fmt.Errorf("%s of %s: %s (%d)", what, stream, resp.Error.Description, resp.Error.ErrCode)
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("%s of %s: empty answer", what, stream)
	}
	hdr, err := decodeHeaders(resp.Message.Header)
	if err != nil {
		return nil, fmt.Errorf("%s of %s: headers: %w", what, stream, err)
	}
	return &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Header: hdr, Data: resp.Message.Data}, nil
}

// decodeHeaders parses a NATS header block ("NATS/1.0\r\nName: value\r\n...\r\n\r\n").
func decodeHeaders(b []byte) (nats.Header, error) {
	h := nats.Header{}
	if len(b) == 0 {
		return h, nil
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b)))
	if _, err := tp.ReadLine(); err != nil { // NATS/1.0 [status]
		return nil, err
	}
	mh, err := tp.ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	for k, v := range mh {
		h[k] = v
	}
	return h, nil
}
