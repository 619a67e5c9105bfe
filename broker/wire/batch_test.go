package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// rec writes one record in the layout of spec/protocol.md §5.2 by hand (not with
// AppendBatchRecord), so that the decoder is checked against the table, not against itself.
func rec(seq uint64, token string, key *string, value string) []byte {
	var b []byte
	for i := 7; i >= 0; i-- {
		b = append(b, byte(seq>>(8*i)))
	}
	b = append(b, byte(len(token)))
	b = append(b, token...)
	u32 := func(n int) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }
	if key == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = append(b, u32(len(*key))...)
		b = append(b, *key...)
	}
	b = append(b, u32(len(value))...)
	return append(b, value...)
}

func str(s string) *string { return &s }

func TestDecodeBatch(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	good := bytes.Join([][]byte{
		rec(3, tok, str("alice"), "v1"),
		rec(4, "", nil, "keyless"),
		rec(9, "", str(""), ""), // the empty key is a key; an empty value
	}, nil)
	recs, err := DecodeBatch(good, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []BatchRecord{
		{Seq: 3, Token: tok, Key: []byte("alice"), Value: []byte("v1")},
		{Seq: 4, NoKey: true, Value: []byte("keyless")},
		{Seq: 9, Key: []byte{}, Value: []byte{}},
	}
	for i, r := range recs {
		w := want[i]
		if r.Seq != w.Seq || r.Token != w.Token || r.NoKey != w.NoKey || !bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) {
			t.Fatalf("record %d: got %+v, want %+v", i, r, w)
		}
	}
	// The encoder writes the same bytes as the table.
	var enc []byte
	for _, r := range want {
		enc = AppendBatchRecord(enc, r)
		if BatchRecordSize(r) != len(AppendBatchRecord(nil, r)) {
			t.Fatalf("BatchRecordSize(%+v) = %d, encoding has %d bytes", r, BatchRecordSize(r), len(AppendBatchRecord(nil, r)))
		}
	}
	if !bytes.Equal(enc, good) {
		t.Fatalf("AppendBatchRecord wrote %x, the table says %x", enc, good)
	}

	bigKey := strings.Repeat("k", MaxKeyLen+1)
	tests := []struct {
		name string
		body []byte
		n    int
		msg  string
	}{
		{"fewer records than the header says", good, 4, "ends after 3 records"},
		{"more records than the header says", good, 2, "bytes after the last of its 2 records"},
		{"sequence zero", rec(0, "", nil, "v"), 1, "sequence 0"},
		{"sequence not increasing", append(rec(5, "", nil, "a"), rec(5, "", nil, "b")...), 2, "sequence 5 does not follow 5"},
		{"sequence going back", append(rec(5, "", nil, "a"), rec(4, "", nil, "b")...), 2, "sequence 4 does not follow 5"},
		{"token too short", rec(1, "short", nil, "v"), 1, "token of 5 bytes"},
		{"token too long", rec(1, strings.Repeat("a", 65), nil, "v"), 1, "token of 65 bytes"},
		{"token with a dot", rec(1, "0123456789abcdef.", nil, "v"), 1, "characters of A-Z"},
		{"bad key flag", func() []byte { b := rec(1, "", nil, "v"); b[9] = 2; return b }(), 1, "key flag 2"},
		{"key too long", rec(1, "", &bigKey, "v"), 1, "key of 65537 bytes"},
		{"key past the end", rec(1, "", str("abc"), "")[:15], 1, "key of 3 bytes"},
		{"value past the end", rec(1, "", nil, "value")[:16], 1, "value of 5 bytes"},
		{"truncated header", []byte{0, 0, 0}, 1, "ends after 0 records"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.body, tc.n)
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want a bad request saying %q", err, tc.msg)
			}
		})
	}
}

func TestParseBatchCount(t *testing.T) {
	for _, v := range []string{"1", "256", "4096"} {
		if _, err := ParseBatchCount(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"", "0", "-1", "4097", "01", "+3", "1 ", "x"} {
		if _, err := ParseBatchCount(v); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%q: got %v, want a bad request", v, err)
		}
	}
}
