package main

import (
	"testing"

	"pctl.dev/pctl/broker"
)

// TestProduceTombstoneMarker: produce --tombstone-marker M sends "key<TAB>M" lines as tombstones
// and every other line as a record (the SDKs' produce commands have the same flag; the client
// conformance harness's compacted row gives it), in one input and in line order; with
// --tombstones it is a usage error.
func TestProduceTombstoneMarker(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	expect(t, admin.run("", "topic", "create", "kvm", "--partitions", "2", "--partitioner", "kafka-murmur2", "--compact"), exitOK)
	prod := cliFor(t, b, broker.RoleProducer)
	expect(t, prod.run("a\n", "produce", "kvm", "--tombstones", "--tombstone-marker", "~T~"), exitUsage, "exclude each other")
	// b is written, deleted and written again; c is deleted last; a value that only contains
	// the marker is a value.
	expect(t, prod.run("a\t1\nb\t1\nb\t~T~\nc\t1\nb\t2\nc\t~T~\nd\tx~T~\n", "produce", "kvm", "--tombstone-marker", "~T~"), exitOK)
	want := map[string]string{"a": "1", "b": "2", "c": "<tombstone>", "d": "x~T~"} // by hand
	r := cliFor(t, b, broker.RoleConsumer).run("", "consume", "kvm", "--group", "g", "--from", "current-epoch", "--format", "jsonl", "--idle-exit", "700ms")
	expect(t, r, exitOK)
	if got, _ := latestByKey(t, r.stdout); !sameMap(got, want) {
		t.Fatalf("after produce --tombstone-marker: %v, want %v", got, want)
	}
}
