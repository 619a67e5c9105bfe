package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestIsWrongSeq: a lost compare-and-set is "wrong last sequence" in both of JetStream's codes —
// 10071 (JSStreamWrongLastSequenceErrF) on a stream of one replica, 10164
// (JSStreamWrongLastSequenceConstantErr, nats-server's errors.json) on a replicated one, which the
// group bucket is on a cluster — and nats.go's ErrKeyRevisionMismatch wrapping either; a member
// that took 10164 for a failure would give up a lease write it only lost. The last case is a real
// server's answer to a stale update. Mutant shown failing: the 10071 check alone (the code before).
func TestIsWrongSeq(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"10071", &jetstream.APIError{Code: 400, ErrorCode: 10071}, true},
		{"10164", &jetstream.APIError{Code: 400, ErrorCode: 10164}, true},
		{"10164 wrapped", fmt.Errorf("update: %w", &jetstream.APIError{Code: 400, ErrorCode: 10164}), true},
		{"revision mismatch", fmt.Errorf("%w: %w", jetstream.ErrKeyRevisionMismatch, &jetstream.APIError{Code: 400, ErrorCode: 10164}), true},
		{"another code", &jetstream.APIError{Code: 503, ErrorCode: 10008}, false},
		{"not an API error", errors.New("wrong last sequence"), false},
		{"nil", nil, false},
	} {
		if got := isWrongSeq(tc.err); got != tc.want {
			t.Errorf("%s: isWrongSeq(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	s := EmbeddedNATS(t, true)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cas"})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	_, err = kv.Update(ctx, "k", []byte("3"), rev) // stale: lost
	if !isWrongSeq(err) {
		t.Fatalf("a real stale update's error %v is not a lost compare-and-set", err)
	}
}
