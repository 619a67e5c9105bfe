// Package client is pctl's Go client: it connects to a broker (spec/protocol.md), manages topics
// and plugins, produces records partitioned on the client by the topic's own WebAssembly module,
// and consumes them in consumer groups with per-key order across epoch changes.
//
// Everything a client computes about partitions it computes with the same module bytes as the
// broker and every other client, fetched by digest and verified against it.
package client
