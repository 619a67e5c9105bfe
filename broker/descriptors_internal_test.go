package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestIsWrongLastSequence: a compare-and-set conflict is recognised by JetStream's error codes
// and nats.go's sentinels, from a real KV bucket, never by the words of a message. Before, any
// error whose text said "wrong last sequence" (a wrapped failure of something else, a message
// relayed from elsewhere) was taken for a conflict (wire.ErrConflict: "retry"), whatever it was.
func TestIsWrongLastSequence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Start(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	kv, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "cas-test"})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	_, staleErr := kv.Update(ctx, "k", []byte("3"), rev) // rev is no longer the last
	_, existsErr := kv.Create(ctx, "k", []byte("4"))
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"update on a stale revision (real KV)", staleErr, true},
		{"create of an existing key (real KV)", existsErr, true},
		{"wrapped stale update", fmt.Errorf("write topic: %w", staleErr), true},
		{"API error 10071", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence, Description: "wrong last sequence: 5"}, true},
		{"API error 10164 (replicated stream)", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, true},
		{"only the words", errors.New("relay: nats: wrong last sequence: 5"), false},
		{"another API error", &jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabled, Description: "wrong last sequence mentioned"}, false},
		{"a timeout", context.DeadlineExceeded, false},
	}
	for _, tc := range cases {
		if tc.err == nil && tc.want {
			t.Fatalf("%s: the KV gave no error", tc.name)
		}
		if got := isWrongLastSequence(tc.err); got != tc.want {
			t.Errorf("%s: isWrongLastSequence(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
