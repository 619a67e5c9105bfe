package builtin

import (
	"encoding/binary"
	"hash/crc32"
)

// librdkafkaConsistent is rd_kafka_msg_partitioner_consistent: rd_crc32(key) (zlib's
// CRC-32, IEEE polynomial) as a uint32, unsigned remainder. The empty key has CRC 0.
func librdkafkaConsistent(key []byte, n int32) int32 {
	mustN(n)
	return int32(crcIEEE(key) % uint32(n))
}

// clmulCutoff is where hash/crc32 switches to its carry-less-multiply kernel on amd64 and
// arm64; below it hash/crc32 runs slicing-by-8 on all but the last 1..8 bytes and then a
// byte-at-a-time loop (its loop test is len > 8), which makes a 16-byte key slower than a
// 64-byte one. Short keys are the common case for partitioning, so they get their own loop.
const clmulCutoff = 64

// crcIEEE is crc32.ChecksumIEEE(key), with slicing-by-8 over every whole 8-byte block
// for keys shorter than clmulCutoff.
func crcIEEE(key []byte) uint32 {
	if len(key) >= clmulCutoff {
		return crc32.ChecksumIEEE(key)
	}
	t := &crcSlicing8
	crc := ^uint32(0)
	b := key
	for len(b) >= 8 {
		crc ^= binary.LittleEndian.Uint32(b)
		crc = t[0][b[7]] ^ t[1][b[6]] ^ t[2][b[5]] ^ t[3][b[4]] ^
			t[4][crc>>24] ^ t[5][(crc>>16)&0xff] ^ t[6][(crc>>8)&0xff] ^ t[7][crc&0xff]
		b = b[8:]
	}
	for _, c := range b {
		crc = t[0][byte(crc)^c] ^ crc>>8
	}
	return ^crc
}

// crcSlicing8 are the slicing-by-8 tables of the reflected IEEE polynomial: crcSlicing8[0]
// is hash/crc32's IEEE table; crcSlicing8[k][i] is the CRC of byte i followed by k zero
// bytes.
var crcSlicing8 = func() (t [8][256]uint32) {
	t[0] = *crc32.IEEETable
	for i := 0; i < 256; i++ {
		crc := t[0][i]
		for k := 1; k < 8; k++ {
			crc = t[0][crc&0xff] ^ crc>>8
			t[k][i] = crc
		}
	}
	return t
}()
