package builtin

import (
	"fmt"
	"testing"
)

// The values in this file are published by the reference projects themselves, in their own
// tests; each table names its source. A failure in any of the partitioner tables means that
// keys remap for existing users of that client.

// remapMsg is the message of a failed compatibility check.
const remapMsg = "keys remap for existing users of this client: do not change the implementation to make this pass"

func TestMurmur2KafkaUtilsTest(t *testing.T) {
	// Source: apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
	// testMurmur2 (expected values of Utils.murmur2, a Java int).
	tests := []struct {
		name string
		key  string
		want int32
	}{
		{name: "21", key: "21", want: -973932308},
		{name: "foobar", key: "foobar", want: -790332482},
		{name: "a-little-bit-long-string", key: "a-little-bit-long-string", want: -985981536},
		{name: "a-little-bit-longer-string", key: "a-little-bit-longer-string", want: -1486304829},
		{name: "lkjh", key: "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", want: -58897971},
		{name: "abc", key: "abc", want: 479470107},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Murmur2([]byte(tt.key)); got != tt.want {
				t.Fatalf("Murmur2(%q) = %d, Kafka UtilsTest.testMurmur2 says %d: %s", tt.key, got, tt.want, remapMsg)
			}
		})
	}
}

// librdkafka tests/0048-partitioner.c, do_test_partitioners: keys (NULL omitted: keyless
// records never reach a partitioner) and the hash each partitioner takes modulo part_cnt,
// which is 7 under test_quick and 17 otherwise.
var librdkafka0048 = []struct {
	name                  string
	key                   string
	consistent, fnv, murm uint32
}{
	{name: "empty", key: "", consistent: 0x0, fnv: 0x7ee3623b, murm: 0x106e08d9},
	{name: "unaligned+1", key: "23456", consistent: 0xb1b451d7, fnv: 0x27e6f469, murm: 0x058d780f},
	{name: "long", key: "this is another string with more length to it perhaps", consistent: 0xb0150df7, fnv: 0x155e3e5f, murm: 0x4f7703da},
	{name: "hejsan", key: "hejsan", consistent: 0xd077037e, fnv: 0x17b1e27a, murm: 0x5ec19395},
}

func TestLibrdkafka0048Partitioner(t *testing.T) {
	consistent, _ := Lookup("librdkafka-consistent")
	fnv, _ := Lookup("librdkafka-fnv1a")
	kafka, _ := Lookup("kafka-murmur2")
	for _, tt := range librdkafka0048 {
		for _, partCnt := range []int32{7, 17} {
			t.Run(fmt.Sprintf("%s/part_cnt=%d", tt.name, partCnt), func(t *testing.T) {
				key := []byte(tt.key)
				if got, want := consistent.Func(key, partCnt), int32(tt.consistent%uint32(partCnt)); got != want {
					t.Errorf("librdkafka-consistent(%q, %d) = %d, librdkafka 0048 expects %d: %s", tt.key, partCnt, got, want, remapMsg)
				}
				if got, want := fnv.Func(key, partCnt), int32(tt.fnv%uint32(partCnt)); got != want {
					t.Errorf("librdkafka-fnv1a(%q, %d) = %d, librdkafka 0048 expects %d: %s", tt.key, partCnt, got, want, remapMsg)
				}
				// librdkafka's murmur2 partitioner is documented as Java-compatible; its
				// constants (from librdkafka's tests/java/Murmur2Cli) check ours too.
				if got, want := kafka.Func(key, partCnt), int32(tt.murm%uint32(partCnt)); got != want {
					t.Errorf("kafka-murmur2(%q, %d) = %d, librdkafka 0048 (murmur2) expects %d: %s", tt.key, partCnt, got, want, remapMsg)
				}
			})
		}
	}
}

func TestLibrdkafkaFNV1aUnittest(t *testing.T) {
	// Source: librdkafka src/rdfnv1a.c, unittest_fnv1a: rd_fnv1a (already abs) as int32,
	// "acquired via" Go's hash/fnv.
	const unaligned = "PreAmbleWillBeRemoved,ThePrePartThatIs"
	tests := []struct {
		name string
		key  string
		want int32
	}{
		{name: "kafka", key: "kafka", want: 0xd33c4e1},
		{name: "giberish", key: "giberish123456789", want: 0x77a58295},
		{name: "short_unaligned", key: "1234", want: 0x23bdd03},
		{name: "short_unaligned+1", key: "234", want: 0x2dea3cd2},
		{name: "short_unaligned+2", key: "34", want: 0x740fa83e},
		{name: "short_unaligned+3", key: "4", want: 0x310ca263},
		{name: "unaligned", key: unaligned, want: 0x65cbd69c},
		{name: "unaligned+1", key: unaligned[1:], want: 0x6e49c79a},
		{name: "unaligned+2", key: unaligned[2:], want: 0x69eed356},
		{name: "unaligned+3", key: unaligned[3:], want: 0x6abcc023},
		{name: "empty", key: "", want: 0x7ee3623b},
	}
	fnv, _ := Lookup("librdkafka-fnv1a")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// With n = 2^31-1 the partition is the hash itself unless it is 0x7fffffff.
			if got := fnv.Func([]byte(tt.key), 0x7fffffff); got != tt.want {
				t.Fatalf("librdkafka-fnv1a(%q, 2^31-1) = %#x, rdfnv1a.c unittest says %#x: %s", tt.key, got, tt.want, remapMsg)
			}
		})
	}
}

func TestSaramaGoldens(t *testing.T) {
	// Source: IBM/sarama partitioner_test.go. TestHashPartitionerMinInt32: "1468509572224"
	// hashes (FNV-1a) to 0x80000000, INT32_MIN as Sarama sees it; Sarama only checks the
	// range, so the expected partitions here are |INT32_MIN| mod n, which is what
	// -(INT32_MIN % n) is in Go.
	const minKey = "1468509572224"
	if got := fnv1a32([]byte(minKey)); got != 0x80000000 {
		t.Fatalf("fnv1a32(%q) = %#x, Sarama's test says 0x80000000", minKey, got)
	}
	sarama, _ := Lookup("sarama-fnv1a")
	rdk, _ := Lookup("librdkafka-fnv1a")
	for _, n := range []int32{1, 2, 3, 7, 50, 100, 1000, 65535, 0x7fffffff} {
		want := int32(uint32(0x80000000) % uint32(n))
		if got := sarama.Func([]byte(minKey), n); got != want {
			t.Errorf("sarama-fnv1a(%q, %d) = %d, want %d", minKey, n, got, want)
		}
		if got := rdk.Func([]byte(minKey), n); got != want {
			t.Errorf("librdkafka-fnv1a(%q, %d) = %d, want %d (abs(INT32_MIN) is 0x80000000)", minKey, n, got, want)
		}
	}

	// Source: IBM/sarama partitioner_test.go, TestConsistentCRCHashPartitioner (100
	// partitions). Sarama's NewConsistentCRCHashPartitioner is CRC-32 IEEE, unsigned
	// remainder: the same function as librdkafka's consistent partitioner.
	tests := []struct {
		name string
		key  string
		want int32
	}{
		{name: "abc123def456", key: "abc123def456", want: 57},
		{name: "SheetJS", key: "SheetJS", want: 26}, // signed remainder would give 70
		{name: "9e8c", key: "9e8c7f4cf45857cfff7645d6", want: 24},
		{name: "3900", key: "3900446192ff85a5f67da10c", want: 75},
		{name: "0f44", key: "0f4407b7a67d6d27de372198", want: 50},
	}
	consistent, _ := Lookup("librdkafka-consistent")
	for _, tt := range tests {
		t.Run("crc/"+tt.name, func(t *testing.T) {
			if got := consistent.Func([]byte(tt.key), 100); got != tt.want {
				t.Fatalf("librdkafka-consistent(%q, 100) = %d, Sarama's CRC partitioner test says %d: %s", tt.key, got, tt.want, remapMsg)
			}
		})
	}
}

// xxhSanityBuffer is xxhsum's XSUM_fillTestBuffer (Cyan4973/xxHash cli/xsum_sanity_check.c).
func xxhSanityBuffer(n int) []byte {
	const prime32 = 2654435761
	const prime64 = 11400714785074694797
	buf := make([]byte, n)
	gen := uint64(prime32)
	for i := range buf {
		buf[i] = byte(gen >> 56)
		gen *= prime64
	}
	return buf
}

func TestXXH64Published(t *testing.T) {
	// Source: Cyan4973/xxHash cli/xsum_sanity_check.c, XSUM_XXH64_testdata (lengths are
	// prefixes of the sanity buffer; seed PRIME32 = 2654435761).
	const prime32 = 2654435761
	buf := xxhSanityBuffer(2367)
	tests := []struct {
		name string
		len  int
		seed uint64
		want uint64
	}{
		{name: "0/0", len: 0, seed: 0, want: 0xEF46DB3751D8E999},
		{name: "0/prime32", len: 0, seed: prime32, want: 0xAC75FDA2929B17EF},
		{name: "1/0", len: 1, seed: 0, want: 0xE934A84ADB052768},
		{name: "1/prime32", len: 1, seed: prime32, want: 0x5014607643A9B4C3},
		{name: "4/0", len: 4, seed: 0, want: 0x9136A0DCA57457EE},
		{name: "14/0", len: 14, seed: 0, want: 0x8282DCC4994E35C8},
		{name: "14/prime32", len: 14, seed: prime32, want: 0xC3BD6BF63DEB6DF0},
		{name: "222/0", len: 222, seed: 0, want: 0xB641AE8CB691C174},
		{name: "222/prime32", len: 222, seed: prime32, want: 0x20CB8AB7AE10C14A},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := XXH64(buf[:tt.len], tt.seed); got != tt.want {
				t.Fatalf("XXH64(sanity[:%d], %d) = %#x, xxHash's sanity check says %#x", tt.len, tt.seed, got, tt.want)
			}
		})
	}
	// Strings: ClickHouse tests/queries/0_stateless/00803_xxhash.sql (xxHash64 of a String
	// is XXH64 seed 0) and the python-xxhash README ("a").
	strs := []struct {
		name, key string
		want      uint64
	}{
		{name: "a", key: "a", want: 0xd24ec4f1a98c6e5b},
		{name: "ABC", key: "ABC", want: 0xe66ae7354fcfee98},
		{name: "xxhash", key: "xxhash", want: 0x32dd38952c4bc720},
		{name: "foo", key: "foo", want: 3728699739546630719},
	}
	for _, tt := range strs {
		t.Run("str/"+tt.name, func(t *testing.T) {
			if got := XXH64([]byte(tt.key), 0); got != tt.want {
				t.Fatalf("XXH64(%q, 0) = %#x, want %#x", tt.key, got, tt.want)
			}
		})
	}
}

func TestJumpGuavaGoldens(t *testing.T) {
	// Source: google/guava HashingTest.testConsistentHash_linearCongruentialGeneratorCompatibility,
	// "golden values to see that implementations across languages are equivalent" for
	// Hashing.consistentHash(long, buckets). Guava evaluates the step as
	// (b+1) / (((key>>>33)+1) / 2^31), not the paper's (b+1) * (2^31 / ((key>>33)+1)); the
	// two round differently for some inputs, but every Guava golden also holds for the
	// paper's expression, which Jump implements (spec/builtins.md requires the paper's).
	golden100 := []int32{0, 55, 62, 8, 45, 59, 86, 97, 82, 59, 73, 37, 17, 56, 86, 21, 90, 37, 38, 83}
	for i, want := range golden100 {
		if got := Jump(uint64(i), 100); got != want {
			t.Errorf("Jump(%d, 100) = %d, Guava golden %d", i, got, want)
		}
	}
	tests := []struct {
		name    string
		key     uint64
		buckets int32
		want    int32
	}{
		{name: "10863919174838991/11", key: 10863919174838991, buckets: 11, want: 6},
		{name: "2016238256797177309/11", key: 2016238256797177309, buckets: 11, want: 3},
		{name: "1673758223894951030/11", key: 1673758223894951030, buckets: 11, want: 5},
		{name: "2/100001", key: 2, buckets: 100001, want: 80343},
		{name: "2201/100001", key: 2201, buckets: 100001, want: 22152},
		{name: "2202/100001", key: 2202, buckets: 100001, want: 15018},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Jump(tt.key, tt.buckets); got != tt.want {
				t.Fatalf("Jump(%d, %d) = %d, Guava golden %d", tt.key, tt.buckets, got, tt.want)
			}
		})
	}
}

func TestJumpFollowsThePaperNotGuava(t *testing.T) {
	// Inputs on which the paper's expression and Guava's rounding differ (found by a search
	// over random keys with n near 2^31, where about 1 pair in 10^7 differs). Expected
	// values from the paper's C++ compiled with g++ (tools/crosscheck/jump/jump_paper.cc);
	// Guava 33.8.0-jre Hashing.consistentHash gives the other column
	// (tools/crosscheck/jump/guava_vs_paper.sh). spec/builtins.md pins the paper's.
	tests := []struct {
		name         string
		key          uint64
		n            int32
		paper, guava int32
	}{
		{name: "a", key: 9813187690726211366, n: 1898378292, paper: 1183863005, guava: 1183863018},
		{name: "exact-2^27", key: 7612004585850187597, n: 1896616770, paper: 134217727, guava: 134217728},
		{name: "b", key: 4439988903201502282, n: 1577780246, paper: 920432073, guava: 920432074},
		{name: "c", key: 6152995148985398655, n: 1593749890, paper: 1040701615, guava: 1040701614},
		{name: "d", key: 7327094575989326061, n: 1220851064, paper: 1025623746, guava: 1025623747},
		{name: "e", key: 280831654133012014, n: 1414248490, paper: 1009003387, guava: 1009003386},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Jump(tt.key, tt.n)
			if got == tt.guava {
				t.Fatalf("Jump(%d, %d) = %d, Guava's rounding; the paper's expression gives %d: %s", tt.key, tt.n, got, tt.paper, remapMsg)
			}
			if got != tt.paper {
				t.Fatalf("Jump(%d, %d) = %d, the paper's C++ gives %d: %s", tt.key, tt.n, got, tt.paper, remapMsg)
			}
		})
	}
}
