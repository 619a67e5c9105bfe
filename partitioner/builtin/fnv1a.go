package builtin

// fnv1a32 is 32-bit FNV-1a (offset basis 0x811c9dc5, prime 0x01000193), as hash/fnv's
// New32a and librdkafka's rd_fnv1a compute it before their sign handling.
func fnv1a32(key []byte) uint32 {
	const prime = 0x01000193
	h := uint32(0x811c9dc5)
	for _, c := range key {
		h ^= uint32(c)
		h *= prime
	}
	return h
}

// librdkafkaFNV1a is rd_kafka_msg_partitioner_fnv1a: rd_fnv1a returns abs(h) of the signed
// hash as a uint32 (abs(INT32_MIN) stays 0x80000000, as librdkafka's build gives), and the
// partitioner takes the unsigned remainder.
func librdkafkaFNV1a(key []byte, n int32) int32 {
	mustN(n)
	h := int32(fnv1a32(key))
	if h < 0 {
		h = -h // wraps for INT32_MIN: 0x80000000
	}
	return int32(uint32(h) % uint32(n))
}

// saramaFNV1a is Sarama's NewHashPartitioner (hashPartitioner.Partition, referenceAbs
// false): the sum as int32, Go's truncating remainder, negated if negative. It equals
// librdkafkaFNV1a for every key and n (-(h rem n) = |h| rem n), but each follows its own
// client's text so that a change in one is caught by its own vectors.
func saramaFNV1a(key []byte, n int32) int32 {
	mustN(n)
	p := int32(fnv1a32(key)) % n
	if p < 0 {
		p = -p
	}
	return p
}
