package builtin

import "hash/crc32"

// librdkafkaConsistent is rd_kafka_msg_partitioner_consistent: rd_crc32(key) (zlib's
// CRC-32, IEEE polynomial) as a uint32, unsigned remainder. The empty key has CRC 0.
func librdkafkaConsistent(key []byte, n int32) int32 {
	mustN(n)
	return int32(crc32.ChecksumIEEE(key) % uint32(n))
}
