package client

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner/builtin"
)

// stickyVectors is spec/vectors/assign/sticky.json: the sticky assignor's cases, written by hand
// from spec/protocol.md §6.2.1, which the Node.js, Python and Java SDKs replay too.
type stickyVectors struct {
	Cases []struct {
		Name       string                  `json:"name"`
		Epochs     map[string]stickyEpochF `json:"epochs"`
		Prev       *wire.Assignment        `json:"prev"`
		Members    []string                `json:"members"`
		Partitions json.RawMessage         `json:"partitions"`
		Epoch      int                     `json:"epoch"`
		WantError  string                  `json:"want_error"`
		Want       struct {
			Round         int64   `json:"round"`
			Owners        []int   `json:"owners"`
			Moved         *[2]int `json:"moved"`
			MovedModulo   *[2]int `json:"moved_modulo"`
			HistoryRounds []int64 `json:"history_rounds"`
		} `json:"want"`
	} `json:"cases"`
	Writes []struct {
		Name         string           `json:"name"`
		Record       *wire.Assignment `json:"record"`
		Members      []string         `json:"members"`
		Partitions   []int            `json:"partitions"`
		Epoch        int              `json:"epoch"`
		Me           string           `json:"me"`
		Complete     bool             `json:"complete"`
		PreviousView []string         `json:"previous_view"`
		Want         bool             `json:"want"`
	} `json:"writes"`
}

type stickyEpochF struct {
	F string `json:"f"`
	N int    `json:"n"`
}

// stickyVectorPlace evaluates the vectors' functions over the key sample: the int-* ones of the
// file's "functions" (h is the integer a sample key spells), and built-ins by partitioner/builtin.
func stickyVectorPlace(t *testing.T, epochs map[string]stickyEpochF) PlaceFunc {
	return func(epoch int, keys [][]byte, out []int32) error {
		e, ok := epochs[strconv.Itoa(epoch)]
		if !ok {
			t.Fatalf("no epoch %d in the case", epoch)
		}
		for i, k := range keys {
			h, err := strconv.Atoi(string(k))
			if err != nil {
				t.Fatalf("key %q is not of the sample", k)
			}
			switch e.F {
			case "int-mod":
				out[i] = int32(h % e.N)
			case "int-range":
				out[i] = int32(h * e.N / 4096)
			case "int-linear":
				b := 1
				for b*2 <= e.N {
					b *= 2
				}
				p := h % (2 * b)
				if p >= e.N {
					p -= b
				}
				out[i] = int32(p)
			default:
				bi, ok := builtin.Lookup(e.F)
				if !ok {
					t.Fatalf("unknown function %q", e.F)
				}
				out[i] = bi.Func(k, int32(e.N))
			}
		}
		return nil
	}
}

// Go's sticky assignor (NextAssignment, MovedKeys, the record's size limit, the leader's
// decision) against the hand-written vectors.
func TestStickyAssignmentVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "spec", "vectors", "assign", "sticky.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v stickyVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) < 10 || len(v.Writes) < 8 {
		t.Fatalf("%d cases, %d writes: the file lost some", len(v.Cases), len(v.Writes))
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			var parts []int
			var s string
			if json.Unmarshal(c.Partitions, &s) == nil {
				lo, hi, _ := strings.Cut(s, "..")
				a, _ := strconv.Atoi(lo)
				b, _ := strconv.Atoi(hi)
				for q := a; q <= b; q++ {
					parts = append(parts, q)
				}
			} else if err := json.Unmarshal(c.Partitions, &parts); err != nil {
				t.Fatal(err)
			}
			got, err := NextAssignment(c.Prev, c.Members, parts, c.Epoch, stickyVectorPlace(t, c.Epochs), now)
			if err == nil {
				if body, _ := json.Marshal(got); len(body) > maxAssignmentRecord {
					err = wire.ErrBadRequest // what writeAssignment refuses
				}
			}
			if c.WantError != "" {
				if !errors.Is(err, wire.ErrBadRequest) || c.WantError != "bad_request" {
					t.Fatalf("err %v, want %s", err, c.WantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			frac := func(f *[2]int) *float64 {
				if f == nil {
					return nil
				}
				x := float64(f[0]) / float64(f[1])
				return &x
			}
			var rounds []int64
			for _, h := range got.History {
				rounds = append(rounds, h.Round)
			}
			if got.Round != c.Want.Round || !reflect.DeepEqual(got.Owners, c.Want.Owners) || !reflect.DeepEqual(got.Moved, frac(c.Want.Moved)) ||
				!reflect.DeepEqual(got.MovedModulo, frac(c.Want.MovedModulo)) || !reflect.DeepEqual(rounds, c.Want.HistoryRounds) {
				t.Errorf("got round %d owners %v moved %v/%v history %v; want round %d owners %v moved %v/%v history %v",
					got.Round, got.Owners, deref(got.Moved), deref(got.MovedModulo), rounds,
					c.Want.Round, c.Want.Owners, deref(frac(c.Want.Moved)), deref(frac(c.Want.MovedModulo)), c.Want.HistoryRounds)
			}
		})
	}
	for _, c := range v.Writes {
		// The leader's decision as Consumer.wanted makes it (assign_group.go).
		got := stickyWrites(c.Record, c.Members, c.Partitions, c.Epoch, c.Me, c.Complete, c.PreviousView)
		if got != c.Want {
			t.Errorf("writes %s: got %v, want %v", c.Name, got, c.Want)
		}
	}
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
