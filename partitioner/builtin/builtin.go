package builtin

import "sort"

// Func computes the partition of key among n partitions, 1 <= n <= 2^31-1, returning a
// value in [0, n). It is pure (the result depends only on key and n), safe for concurrent
// use, does not allocate and does not retain key.
//
// n < 1 is a caller bug (hosts check n before calling; see abi-v1.md §1.2): a Func panics.
type Func func(key []byte, n int32) int32

// Range is a half-open range [Lo, Hi) of partitions.
type Range struct{ Lo, Hi int32 }

// Builtin describes one built-in partitioner.
type Builtin struct {
	// Name is the partitioner's name in spec/builtins.md, e.g. "kafka-murmur2".
	Name string
	// Description is one line for humans.
	Description string
	// Func computes partitions.
	Func Func
	// Ancestry, when non-nil, returns a sound superset (exact where the spec says) of
	//
	//	{Func(k, fromN) : Func(k, toN) == child}
	//
	// as sorted, disjoint, non-adjacent, non-empty ranges within [0, fromN). It is the
	// native counterpart of the pctl_ancestry export (abi-v1.md §2.7). It returns nil when
	// the arguments are out of range (fromN < 1, toN < 1, child outside [0, toN)); for
	// valid arguments the result is never empty. Ancestry is nil for builtins that declare
	// none.
	Ancestry func(fromN, toN, child int32) []Range
}

// registry is sorted by name; All and Lookup hand out copies.
var registry = []Builtin{
	{
		Name:        "jump",
		Description: "Jump consistent hash (Lamping & Veach 2014) over XXH64 (seed 0) of the key",
		Func:        jumpPartition,
		Ancestry:    jumpAncestry,
	},
	{
		Name:        "kafka-murmur2",
		Description: "Kafka Java client default for keyed records: toPositive(murmur2(key)) % n",
		Func:        kafkaMurmur2,
	},
	{
		Name:        "librdkafka-consistent",
		Description: "librdkafka consistent partitioner: CRC-32 (IEEE) of the key, unsigned % n",
		Func:        librdkafkaConsistent,
	},
	{
		Name:        "librdkafka-fnv1a",
		Description: "librdkafka fnv1a partitioner: abs(FNV-1a 32 as int32), unsigned % n",
		Func:        librdkafkaFNV1a,
	},
	{
		Name:        "linear-murmur2",
		Description: "Linear hashing over Kafka's murmur2: growing n to n+1 splits exactly one partition",
		Func:        linearMurmur2,
		Ancestry:    linearMurmur2Ancestry,
	},
	{
		Name:        "sarama-fnv1a",
		Description: "Sarama NewHashPartitioner: FNV-1a 32 as int32, truncating % n, negated if negative",
		Func:        saramaFNV1a,
	},
}

func init() {
	if !sort.SliceIsSorted(registry, func(i, j int) bool { return registry[i].Name < registry[j].Name }) {
		panic("builtin: registry is not sorted by name")
	}
}

// All returns every built-in partitioner, sorted by name. The slice is the caller's own.
func All() []Builtin {
	return append([]Builtin(nil), registry...)
}

// Lookup returns the built-in partitioner with the given name, and whether there is one.
func Lookup(name string) (Builtin, bool) {
	i := sort.Search(len(registry), func(i int) bool { return registry[i].Name >= name })
	if i < len(registry) && registry[i].Name == name {
		return registry[i], true
	}
	return Builtin{}, false
}

// mustN panics when n is not a valid partition count; the check is one predictable branch.
func mustN(n int32) {
	if n < 1 {
		panic("builtin: partition count n < 1 (hosts must check n before partitioning)")
	}
}

// validAncestryArgs reports whether (fromN, toN, child) are in range for an ancestry query.
func validAncestryArgs(fromN, toN, child int32) bool {
	return fromN >= 1 && toN >= 1 && child >= 0 && child < toN
}
