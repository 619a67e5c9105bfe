package produce

// supersededInBatch marks, on a compacted topic, records of a batch that a read-back cannot find
// because a later record of the same key in the same batch was found: the stream keeps one
// message per key (spec/protocol.md §10.1), so storing the later one removed the earlier. Such a
// record counts as stored (found at sequence 0: it has no message any more). Re-sending it would
// store an older value over a newer one of its key. Whether it was in fact stored makes no
// difference to the log: either way the later record is the key's value.
func supersededInBatch(keys [][]byte, from int, found map[int]uint64) {
	later := map[string]bool{} // keys of records after i that were found
	for i := len(keys) - 1; i >= from; i-- {
		k := string(keys[i])
		if _, ok := found[i]; ok {
			later[k] = true
			continue
		}
		if later[k] {
			found[i] = 0
		}
	}
}
