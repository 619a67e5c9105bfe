package runtime

import "fmt"

// Accessors for the conformance checker (package conformance), which must call the optional
// exports on one specific instance, between partition calls, to prove that they do not change
// results (spec/abi-v1.md §2.6, §2.7). Ordinary callers use Pool.Ancestry and Module.Metadata.

// Metadata calls pctl_metadata on this instance and returns a copy of the document it points
// at. A module without pctl_metadata returns (nil, nil). A module must return the same document
// on every call; conformance compares it with the one read at load.
func (i *Instance) Metadata() ([]byte, error) {
	in, err := i.p.ready(i.s)
	if err != nil {
		return nil, err
	}
	if !in.m.HasMetadata {
		return nil, nil
	}
	res, err := in.call("pctl_metadata", in.mod.ExportedFunction("pctl_metadata"))
	if err != nil {
		return nil, err
	}
	ptr, n := uint32(res[0]>>32), uint32(res[0])
	if n > MaxMetadataBytes {
		return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_metadata", Err: ErrBadMetadata,
			Detail: fmt.Sprintf("returned %d bytes; the limit is %d", n, MaxMetadataBytes)}
	}
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return nil, &CallError{Digest: in.m.Digest, Name: in.m.displayName(), Op: "pctl_metadata", Err: ErrBadMetadata,
			Detail: fmt.Sprintf("points at [%d, %d), outside memory (%d bytes)", ptr, uint64(ptr)+uint64(n), in.mem.Size())}
	}
	return append([]byte(nil), b...), nil
}

// Ancestry is Pool.Ancestry on this instance.
func (i *Instance) Ancestry(fromN, toN, child int32) ([]Range, error) {
	if err := checkN(fromN); err != nil {
		return nil, err
	}
	if err := checkN(toN); err != nil {
		return nil, err
	}
	if child < 0 || child >= toN {
		return nil, fmt.Errorf("runtime: Ancestry: child %d is not a partition of %d", child, toN)
	}
	in, err := i.p.ready(i.s)
	if err != nil {
		return nil, err
	}
	return in.ancestry(fromN, toN, child)
}
