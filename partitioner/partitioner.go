package partitioner

import (
	"errors"

	"pctl.dev/pctl/runtime"
)

// Partitioner computes partitions. Implementations are safe for concurrent use and
// deterministic: the result depends only on (key, n) and the partitioner's config.
type Partitioner interface {
	// Name is the partitioner's declared name, e.g. "kafka-murmur2".
	Name() string
	// Digest is the hex SHA-256 of the module that defines the partitioner. For a native
	// built-in it is the digest of the built-in's embedded module, which it matches bit for bit.
	Digest() string
	// Partition returns the partition of key among n partitions, 1 <= n <= 2^31-1.
	Partition(key []byte, n int32) (int32, error)
	// PartitionBatch computes out[i] = Partition(keys[i], n) for every i, faster.
	PartitionBatch(keys [][]byte, n int32, out []int32) error
	// Ancestry returns the parents the partitioner declares for child when the partition count
	// changes from fromN to toN (spec/abi-v1.md §2.7): a sound superset of
	// {Partition(k, fromN) : Partition(k, toN) == child}. ErrNoAncestry means it declares none.
	Ancestry(fromN, toN, child int32) ([]Range, error)
	// Close releases the partitioner's resources.
	Close() error
}

// Range is a half-open range [Lo, Hi) of partitions.
type Range = runtime.Range

var (
	// ErrUnknownPartitioner is returned for a reference that names no built-in, no known digest
	// and no readable file.
	ErrUnknownPartitioner = errors.New("unknown partitioner")
	// ErrUnreadable is returned when a reference names a file that exists but cannot be read.
	ErrUnreadable = errors.New("cannot read plugin file")
	// ErrNoAncestry is returned by Ancestry when the partitioner declares no ancestry for the
	// arguments; callers fall back to observed ancestry or to all old partitions.
	ErrNoAncestry = errors.New("partitioner declares no ancestry")
	// ErrNotBuiltin is returned by Native for a name that is not a built-in.
	ErrNotBuiltin = errors.New("not a built-in partitioner")
	// ErrBadConfig is returned by EncodeConfig for a malformed K=V pair.
	ErrBadConfig = errors.New("bad partitioner config")
)
