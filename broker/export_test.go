package broker

// Test hooks (compiled only into this package's tests).

// DropConnection closes the broker's NATS connection, as the death of its process would: its
// services stop answering, requests in progress get no answer.
func (b *Broker) DropConnection() { b.nc.Close() }
