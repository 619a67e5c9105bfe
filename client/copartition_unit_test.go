package client_test

import (
	"strconv"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// modPlace places sample key "i" in partition i mod N of the epoch's count: a function whose
// doublings split partition q into q and q+N, like linear hashing, with shares known by hand
// (each partition of N holds 4096/N sample keys).
func modPlace(counts map[int]int) client.PlaceFunc {
	return func(epoch int, keys [][]byte, out []int32) error {
		for i, k := range keys {
			v, _ := strconv.Atoi(string(k))
			out[i] = int32(v % counts[epoch])
		}
		return nil
	}
}

func topicOf(counts ...int) *wire.Topic {
	t := &wire.Topic{Name: "f"}
	for i, n := range counts {
		t.Epochs = append(t.Epochs, wire.Epoch{Epoch: i + 1, Partitions: n})
	}
	return t
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// The follower rule of spec/protocol.md §6.2.3, steps 1 to 3, against owners worked out by hand.
func TestCoPartitionedAssignmentRule(t *testing.T) {
	members := []string{"a", "b", "c"}
	lead8 := &wire.Assignment{Assignor: "sticky", Epoch: 2, Members: members, Partitions: seq(8), Owners: []int{0, 1, 2, 0, 1, 2, 0, 1}}
	leadPlace := modPlace(map[int]int{1: 4, 2: 8})
	for _, tc := range []struct {
		name   string
		topic  *wire.Topic
		prev   *wire.Assignment
		parts  []int
		owners []int
	}{
		// Same count: by partition number.
		{"same count", topicOf(4, 8), nil, seq(8), []int{0, 1, 2, 0, 1, 2, 0, 1}},
		// Follower at 4: q holds the lead's q (owner x) and q+4 (owner y), 512 keys each; the
		// previous owner holds some of them and stays (step 1).
		{"behind keeps its owner", topicOf(4), &wire.Assignment{Epoch: 1, Members: members, Partitions: seq(4), Owners: []int{1, 2, 0, 1}}, seq(4), []int{1, 2, 0, 1}},
		// A previous owner that holds none of q's keys gives way to the largest share (step 2:
		// ties to the lowest index).
		{"largest share", topicOf(4), &wire.Assignment{Epoch: 1, Members: members, Partitions: seq(4), Owners: []int{2, 0, 1, 2}}, seq(4), []int{0, 1, 0, 0}},
		// No previous record: the largest share, ties to the lowest index.
		{"first record", topicOf(4), nil, seq(4), []int{0, 1, 0, 0}},
		// Follower ahead, at 16: child q+8 holds keys of the lead's q alone.
		{"ahead", topicOf(4, 8, 16), nil, seq(16), []int{0, 1, 2, 0, 1, 2, 0, 1, 0, 1, 2, 0, 1, 2, 0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			counts := map[int]int{}
			for _, e := range tc.topic.Epochs {
				counts[e.Epoch] = e.Partitions
			}
			got, err := client.CoPartitionedAssignment(lead8, leadPlace, tc.prev, tc.topic, tc.parts, modPlace(counts), time.Unix(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Owners) != len(tc.owners) {
				t.Fatalf("owners %v, want %v", got.Owners, tc.owners)
			}
			for j := range tc.owners {
				if got.Owners[j] != tc.owners[j] {
					t.Fatalf("owners %v, want %v (partition %d)", got.Owners, tc.owners, tc.parts[j])
				}
			}
		})
	}
}
