package wire

import (
	"encoding/binary"
	"fmt"
	"strconv"
)

// Batched produce requests (spec/protocol.md §5.2): header HeaderBatch with the record count,
// HeaderProducer, and a body of records encoded by AppendBatchRecord.
const (
	// HeaderBatch on a produce request is the number of records in its body.
	HeaderBatch = "Pctl-Batch"
	// MaxBatchRecords is the most records one batched request may carry.
	MaxBatchRecords = 4096
)

// BatchRecord is one record of a batched produce request.
type BatchRecord struct {
	Seq   uint64 // the record's Pctl-Seq
	Token string // its Pctl-Token; "": none
	NoKey bool
	Key   []byte
	Value []byte
}

// BatchRecordSize is the number of bytes r takes in a batch body.
func BatchRecordSize(r BatchRecord) int {
	n := 8 + 1 + len(r.Token) + 1 + 4 + len(r.Value)
	if !r.NoKey {
		n += 4 + len(r.Key)
	}
	return n
}

// AppendBatchRecord appends r's encoding to b. The caller checks the token and the key's
// length (ValidBatchRecord).
func AppendBatchRecord(b []byte, r BatchRecord) []byte {
	b = binary.BigEndian.AppendUint64(b, r.Seq)
	b = append(b, byte(len(r.Token)))
	b = append(b, r.Token...)
	if r.NoKey {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Key)))
		b = append(b, r.Key...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.Value)))
	return append(b, r.Value...)
}

// ParseBatchCount parses a HeaderBatch value: 1 to MaxBatchRecords.
func ParseBatchCount(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxBatchRecords || strconv.Itoa(n) != v {
		return 0, fmt.Errorf("%w: %s %q: give the number of records in the body, 1 to %d (spec/protocol.md §5.2)", ErrBadRequest, HeaderBatch, v, MaxBatchRecords)
	}
	return n, nil
}

// DecodeBatch decodes the body of a batched request of n records. Keys and values alias data.
// It checks everything §5.2 says of the body: the sequence numbers positive and increasing, the
// tokens' length and characters, the key flag, the key lengths, and that exactly n records fill
// the body.
func DecodeBatch(data []byte, n int) ([]BatchRecord, error) {
	bad := func(i int, format string, args ...any) error {
		return fmt.Errorf("%w: batched produce request, record %d of %d: %s (spec/protocol.md §5.2 gives the layout)", ErrBadRequest, i+1, n, fmt.Sprintf(format, args...))
	}
	recs := make([]BatchRecord, n)
	var last uint64
	for i := range recs {
		r := &recs[i]
		if len(data) < 9 {
			return nil, bad(i, "the body ends after %d records", i)
		}
		r.Seq = binary.BigEndian.Uint64(data)
		if r.Seq == 0 || r.Seq <= last {
			return nil, bad(i, "sequence %d does not follow %d (positive and increasing)", r.Seq, last)
		}
		last = r.Seq
		t := int(data[8])
		data = data[9:]
		if t != 0 && (t < 16 || t > 64) || len(data) < t {
			return nil, bad(i, "token of %d bytes: 0, or 16 to 64", t)
		}
		r.Token = string(data[:t])
		if t > 0 && !ValidToken(r.Token) {
			return nil, bad(i, "token %q: characters of A-Z a-z 0-9 _ - only", r.Token)
		}
		data = data[t:]
		if len(data) < 1 {
			return nil, bad(i, "the body ends before the key flag")
		}
		switch data[0] {
		case 0:
			r.NoKey = true
			data = data[1:]
		case 1:
			if len(data) < 5 {
				return nil, bad(i, "the body ends before the key length")
			}
			k := binary.BigEndian.Uint32(data[1:])
			data = data[5:]
			if k > MaxKeyLen || uint64(len(data)) < uint64(k) {
				return nil, bad(i, "key of %d bytes (at most %d, and within the body)", k, MaxKeyLen)
			}
			r.Key = data[:k:k]
			data = data[k:]
		default:
			return nil, bad(i, "key flag %d: 0 keyless, 1 keyed", data[0])
		}
		if len(data) < 4 {
			return nil, bad(i, "the body ends before the value length")
		}
		v := binary.BigEndian.Uint32(data)
		data = data[4:]
		if uint64(len(data)) < uint64(v) {
			return nil, bad(i, "value of %d bytes, but %d bytes are left in the body", v, len(data))
		}
		r.Value = data[:v:v]
		data = data[v:]
	}
	if len(data) > 0 {
		return nil, fmt.Errorf("%w: batched produce request: %d bytes after the last of its %d records (is %s right?)", ErrBadRequest, len(data), n, HeaderBatch)
	}
	return recs, nil
}

// MaxKeyLen is the longest partition key (spec/abi-v1.md §1.1).
const MaxKeyLen = 65536

// ValidToken reports whether s is a valid Pctl-Token: 16 to 64 characters of A-Z a-z 0-9 _ -.
func ValidToken(s string) bool {
	if len(s) < 16 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ProduceResult is one record's result in a ProduceBatchReply: the fields of a ProduceReply, or
// Error.
type ProduceResult struct {
	Partition int         `json:"partition"`
	Epoch     int         `json:"epoch"`
	Seq       uint64      `json:"seq"`
	Duplicate bool        `json:"duplicate,omitempty"`
	Error     *ErrorReply `json:"error,omitempty"`
}

// ProduceBatchReply answers a batched produce request: one result per record, in body order.
type ProduceBatchReply struct {
	Results []ProduceResult `json:"results"`
	Broker  string          `json:"broker,omitempty"`
}
