package broker

import "context"

// Test hooks (compiled only into this package's tests).

// DropConnection closes the broker's NATS connection, as the death of its process would: its
// services stop answering, requests in progress get no answer.
func (b *Broker) DropConnection() { b.nc.Close() }

// ScanKeys is scanKeys, the scan behind an epoch's observed ancestry.
func (b *Broker) ScanKeys(ctx context.Context, topic string, q int, last uint64, f func(key []byte, epoch int) error) error {
	return b.scanKeys(ctx, topic, q, last, f)
}

// RetryBackoff is retryBackoff, for its table test.
var RetryBackoff = retryBackoff
