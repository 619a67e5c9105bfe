// Package client is pctl's Go client: it connects to a broker (spec/protocol.md), manages topics
// and plugins, produces records partitioned on the client by the topic's own WebAssembly module,
// and consumes them in consumer groups with per-key order across epoch changes.
//
// A consumer group reads one topic (Client.NewConsumer), or several co-partitioned topics at once
// (Client.NewCoConsumer, spec/protocol.md §6.2.3): an input and its changelog with the same
// partition function, whose partition p goes to one member in every topic, also while the topics
// are expanded one after the other. Stateful processors hand per-key state over with a
// StateHandler (§6.9), and a member that joins can warm up first (ConsumerOptions.WarmUp, §6.10):
// as a standby that takes no partition it builds the state of the keys it will own, and joins
// within a lag threshold (a co-partitioned member warms once for all its topics; Client.Standbys
// lists a topic's standbys; ChangelogReadStart says where a reader of a backfilled changelog can
// start).
//
// The producer's engine (fencing, in-order re-send, the ambiguous search, fast batches) is
// internal/produce, shared with the broker's produce service; Producer is its public face.
//
// Everything a client computes about partitions it computes with the same module bytes as the
// broker and every other client, fetched by digest and verified against it.
package client
