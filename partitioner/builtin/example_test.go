package builtin_test

import (
	"fmt"

	"pctl.dev/pctl/partitioner/builtin"
)

func ExampleLookup() {
	kafka, ok := builtin.Lookup("kafka-murmur2")
	if !ok {
		panic("kafka-murmur2 is always built in")
	}
	// The partition the Apache Kafka Java client picks for key "21" among 8 partitions.
	fmt.Println(kafka.Func([]byte("21"), 8))
	// Output: 4
}

func ExampleBuiltin_ancestry() {
	lin, _ := builtin.Lookup("linear-murmur2")
	// Growing from 5 to 6 partitions splits partition 1 into 1 and 5: the new partition 5
	// has the single parent 1, which consumers drain before reading 5.
	fmt.Println(lin.Ancestry(5, 6, 5))
	jump, _ := builtin.Lookup("jump")
	// Jump moves keys into new partitions from anywhere: partition 5's parents are [0, 5).
	fmt.Println(jump.Ancestry(5, 6, 5))
	// Output:
	// [{1 2}]
	// [{0 5}]
}

func ExampleAll() {
	for _, b := range builtin.All() {
		fmt.Println(b.Name)
	}
	// Output:
	// jump
	// kafka-murmur2
	// librdkafka-consistent
	// librdkafka-fnv1a
	// linear-murmur2
	// sarama-fnv1a
}
