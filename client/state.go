package client

import (
	"context"
	"fmt"
	"sort"

	"pctl.dev/pctl/broker/wire"
)

// This file is the state handover API (spec/protocol.md §6.9): per-key state callbacks built on
// the partition and key-level callbacks (§6.5), so that a stateful processor writes "flush the
// state of the keys leaving, load the state of the keys arriving" once.

// StateHandler is a stateful processor's per-key state, as a consumer hands it over between
// members. The consumer calls it from its own goroutines, one call at a time per consumer (calls
// are serialised), never while it holds a lock, and never while it delivers a record of a key in
// the call's KeySet:
//
//   - Load(ks) before the member delivers a record of a key it does not hold (ks: that one key),
//     and after the record passed its epoch gate (spec/protocol.md §6.5): every older record of
//     the key, in any partition, is then committed by the group, so whoever delivered them has
//     made their state durable. Load replaces what the processor has for the key with the durable
//     state (for example the changelog's latest value; none for a new key).
//   - Flush(ks) when keys leave the member: before it gives a partition up (ks: the keys it holds
//     for that partition), and at an epoch change, after the last record of the old epoch, for
//     the keys that move to a partition another member owns. When Flush returns their state must
//     be durable (another member loads it next) and the processor may drop it.
//
// Keys that move at an epoch change between two partitions this member owns stay where they are:
// no Flush, no Load (the sticky assignor, spec/protocol.md §6.2.1, makes that the common case).
// A record delivered again after a crash comes to a member that loads its key first: a processor
// that counts exactly once writes, with each key's durable state, which input record (partition
// and sequence) last changed it (see examples/stateful). An error from Load or Flush stops the
// member (Run returns it); a partition whose Flush failed is not released: its lease expires and
// the next owner loads what was durable. A partition whose lease was lost is not flushed (its new
// owner may already write its keys): the member forgets the keys and loads them again if they
// come back. A misplaced record delivered by MisplacedDeliver gets no Load (no order is promised
// for it); a consumer with a StateHandler cannot disable gating.
type StateHandler interface {
	Load(ctx context.Context, ks KeySet) error
	Flush(ctx context.Context, ks KeySet) error
}

// StateReason says why keys are handed over.
type StateReason int

const (
	// KeyArrives: the member is about to deliver a record of a key it does not hold (Load).
	KeyArrives StateReason = iota
	// PartitionRevoked: the member gives Partition up, or stops, or follows a reset (Flush).
	PartitionRevoked
	// KeysRevoked: keys leave Partition at the end of epoch FromEpoch for partitions of ToEpoch
	// that other members own (Flush).
	KeysRevoked
)

func (r StateReason) String() string {
	switch r {
	case KeyArrives:
		return "key arrives"
	case PartitionRevoked:
		return "partition revoked"
	case KeysRevoked:
		return "keys revoked"
	}
	return fmt.Sprintf("StateReason(%d)", int(r))
}

// KeySet names the keys of one handover: Keys, exactly (Contains is the same set as a function).
type KeySet struct {
	Topic     string
	Reason    StateReason
	Partition int
	// FromEpoch and ToEpoch describe an epoch change (KeysRevoked).
	FromEpoch, ToEpoch int
	Keys               [][]byte
	set                map[string]bool
}

// Contains reports whether key is in the set.
func (ks KeySet) Contains(key []byte) bool { return ks.set[string(key)] }

func newKeySet(topic string, reason StateReason, q int, keys []string) KeySet {
	sort.Strings(keys)
	ks := KeySet{Topic: topic, Reason: reason, Partition: q, Keys: make([][]byte, len(keys)), set: make(map[string]bool, len(keys))}
	for i, k := range keys {
		ks.Keys[i] = []byte(k)
		ks.set[k] = true
	}
	return ks
}

// stateEnsure loads a key's state before its record is delivered from partition q, unless the
// member holds it; it then holds it for q.
func (cn *Consumer) stateEnsure(ctx context.Context, q int, key []byte) error {
	cn.mu.Lock()
	h, ok := cn.home[string(key)]
	if ok && h != q {
		cn.home[string(key)] = q // it moved here from a partition of ours
	}
	cn.mu.Unlock()
	if ok {
		return nil
	}
	cn.stateMu.Lock()
	defer cn.stateMu.Unlock()
	if err := cn.opts.State.Load(ctx, newKeySet(cn.topic, KeyArrives, q, []string{string(key)})); err != nil {
		return fmt.Errorf("state load of key %q (partition %d): %w", key, q, err)
	}
	cn.mu.Lock()
	cn.home[string(key)] = q
	cn.mu.Unlock()
	return nil
}

// stateKeysRevoked runs on keys revoked (q, e): the keys held for q that move to a partition this
// member does not own are flushed; the others stay, held for their new partition.
func (cn *Consumer) stateKeysRevoked(ctx context.Context, kc KeyChange) {
	cn.stateMu.Lock()
	defer cn.stateMu.Unlock()
	next := cn.epochOf(kc.ToEpoch)
	if next == nil {
		return
	}
	fNew, err := cn.partitionerFor(ctx, next)
	if err != nil {
		cn.failState(fmt.Errorf("keys revoked from partition %d: %w", kc.Partition, err))
		return
	}
	n := int32(next.Partitions)
	cn.mu.Lock()
	var leave []string
	for k, h := range cn.home {
		if h != kc.Partition || !kc.Moved([]byte(k)) {
			continue
		}
		p, err := fNew.Partition([]byte(k), n)
		if _, ours := cn.owned[int(p)]; err == nil && ours {
			cn.home[k] = int(p)
		} else {
			leave = append(leave, k)
		}
	}
	cn.mu.Unlock()
	if len(leave) == 0 {
		return
	}
	ks := newKeySet(cn.topic, KeysRevoked, kc.Partition, leave)
	ks.FromEpoch, ks.ToEpoch = kc.FromEpoch, kc.ToEpoch
	if err := cn.opts.State.Flush(ctx, ks); err != nil {
		cn.failState(fmt.Errorf("state flush (keys revoked from partition %d, epoch %d): %w", kc.Partition, kc.FromEpoch, err))
		return
	}
	cn.mu.Lock()
	for _, k := range leave {
		if cn.home[k] == kc.Partition {
			delete(cn.home, k)
		}
	}
	cn.mu.Unlock()
}

// statePartition flushes the keys the member holds for partition q (its worker has stopped).
func (cn *Consumer) statePartition(ctx context.Context, q int) error {
	if cn.opts.State == nil {
		return nil
	}
	cn.stateMu.Lock()
	defer cn.stateMu.Unlock()
	cn.mu.Lock()
	var keys []string
	for k, h := range cn.home {
		if h == q {
			keys = append(keys, k)
		}
	}
	cn.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	if err := cn.opts.State.Flush(ctx, newKeySet(cn.topic, PartitionRevoked, q, keys)); err != nil {
		return fmt.Errorf("state flush of partition %d: %w", q, err)
	}
	cn.mu.Lock()
	for _, k := range keys {
		if cn.home[k] == q {
			delete(cn.home, k)
		}
	}
	cn.mu.Unlock()
	return nil
}

// stateForget stops holding the keys held for partition q without flushing them: q's lease was
// lost, its new owner loads them, and this member loads them again before it delivers one.
func (cn *Consumer) stateForget(q int) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for k, h := range cn.home {
		if h == q {
			delete(cn.home, k)
		}
	}
}

// stateFlushAll flushes every partition in qs (a reset).
func (cn *Consumer) stateFlushAll(ctx context.Context, qs []int) error {
	sort.Ints(qs)
	for _, q := range qs {
		if err := cn.statePartition(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (cn *Consumer) epochOf(e int) *wire.Epoch {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.desc.Epoch(e)
}

// failState stops the member with a state handover's error.
func (cn *Consumer) failState(err error) {
	cn.mu.Lock()
	f := cn.fail
	cn.mu.Unlock()
	if f != nil {
		f(err)
	}
}
