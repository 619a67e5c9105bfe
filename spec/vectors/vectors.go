// Package vectors embeds the cross-check vectors of spec/vectors (format in README.md beside
// this file): partitions of the built-in partitioners computed by the reference implementations
// themselves (kafka-clients, librdkafka, Sarama, the jump paper's code), and the first bytes of
// the deterministic WASI random stream. Hosts and the conformance checker compare against them;
// nothing here is computed by pctl's own code.
//
// All functions are safe for concurrent use. Each call parses the embedded JSON afresh and
// returns data the caller owns.
package vectors

import (
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

//go:embed *.json
var files embed.FS

// wasiRandomFile is the one JSON file that is not a partitioner's.
const wasiRandomFile = "wasi-random.json"

// Case is one reference answer: Partition is the partition of Key among N partitions.
type Case struct {
	Key       []byte // may be empty: the empty key is a key like any other
	N         int32
	Partition int32
}

// File is one partitioner's vectors, in the order of keys.txt.
type File struct {
	Partitioner string // a name from spec/builtins.md
	Source      string // what computed the partitions: library, version, entry point, date
	Cases       []Case
}

// Names returns the partitioners that have a vector file, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, ".")
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && e.Name() != wasiRandomFile {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Load parses the vectors of one partitioner ("kafka-murmur2" reads kafka-murmur2.json). It
// fails for a name without a file and for a file that breaks the format of README.md (a bad hex
// key, n outside [1, 2^31-1], a partition outside [0, n), a "partitioner" field that names
// another partitioner).
func Load(partitioner string) (*File, error) {
	if partitioner+".json" == wasiRandomFile || strings.ContainsAny(partitioner, "/\\") {
		return nil, fmt.Errorf("vectors: %q is not a partitioner; have %s", partitioner, strings.Join(Names(), ", "))
	}
	data, err := files.ReadFile(partitioner + ".json")
	if err != nil {
		return nil, fmt.Errorf("vectors: no vectors for %q; have %s", partitioner, strings.Join(Names(), ", "))
	}
	var raw struct {
		Partitioner string `json:"partitioner"`
		Source      string `json:"source"`
		Cases       []struct {
			KeyHex    string `json:"key_hex"`
			N         int64  `json:"n"`
			Partition int64  `json:"partition"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("vectors: %s.json: %v", partitioner, err)
	}
	if raw.Partitioner != partitioner {
		return nil, fmt.Errorf("vectors: %s.json names partitioner %q", partitioner, raw.Partitioner)
	}
	f := &File{Partitioner: raw.Partitioner, Source: raw.Source, Cases: make([]Case, len(raw.Cases))}
	for i, c := range raw.Cases {
		key, err := hex.DecodeString(c.KeyHex)
		if err != nil {
			return nil, fmt.Errorf("vectors: %s.json case %d: key_hex: %v", partitioner, i, err)
		}
		if c.N < 1 || c.N > 1<<31-1 || c.Partition < 0 || c.Partition >= c.N {
			return nil, fmt.Errorf("vectors: %s.json case %d: n=%d partition=%d; want 1 <= n <= 2^31-1 and 0 <= partition < n", partitioner, i, c.N, c.Partition)
		}
		f.Cases[i] = Case{Key: key, N: int32(c.N), Partition: int32(c.Partition)}
	}
	return f, nil
}

// WASIRandom is the start of the deterministic WASI random stream (spec/abi-v1.md §6.2).
type WASIRandom struct {
	State0  uint64   // SplitMix64's initial state: 0
	Outputs []uint64 // outputs 1, 2, ... of SplitMix64
	Bytes   []byte   // the stream's first bytes: Outputs concatenated, little-endian
}

// LoadWASIRandom parses wasi-random.json.
func LoadWASIRandom() (*WASIRandom, error) {
	data, err := files.ReadFile(wasiRandomFile)
	if err != nil {
		return nil, fmt.Errorf("vectors: %v", err)
	}
	var raw struct {
		State0   uint64   `json:"state0"`
		Outputs  []string `json:"outputs"`
		BytesHex string   `json:"bytes_hex"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("vectors: %s: %v", wasiRandomFile, err)
	}
	w := &WASIRandom{State0: raw.State0}
	for i, s := range raw.Outputs {
		v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("vectors: %s: output %d: %v", wasiRandomFile, i+1, err)
		}
		w.Outputs = append(w.Outputs, v)
	}
	if w.Bytes, err = hex.DecodeString(raw.BytesHex); err != nil {
		return nil, fmt.Errorf("vectors: %s: bytes_hex: %v", wasiRandomFile, err)
	}
	return w, nil
}
