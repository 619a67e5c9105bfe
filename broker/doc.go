// Package broker is pctl's broker: an embedded NATS server with JetStream (or a connection to an
// existing NATS server or cluster) plus the services that make topics with WebAssembly
// partitioners work on it:
//
//   - a plugin registry (Object Store, named by digest; uploads must pass conformance);
//   - topic descriptors (KV, changed only by compare-and-set), one stream per partition;
//   - a produce service that partitions for thin clients with the topic's own module and
//     publishes with the producer engine behind client.Producer (internal/produce; the broker
//     does not import package client);
//   - epoch changes that grow, shrink or swap a topic's partitioning without breaking per-key
//     order (fencing, boundaries, ancestry);
//   - role-based access: admin, producer and consumer credentials.
//
// The wire protocol is spec/protocol.md, with its constants in package broker/wire. Clients are
// in package client.
package broker
