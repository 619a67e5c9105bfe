package proto_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/proto"
	"pctl.dev/pctl/internal/proto/protovec"
)

const vectorDir = "../../spec/vectors/protocol"

// replayAll replays every checked-in vector file against c.
func replayAll(t *testing.T, c protovec.Core) (mismatches []protovec.Mismatch, steps int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files in %s (%v): run go run ./internal/proto/gen", vectorDir, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, n, err := protovec.Replay(b, c)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		mismatches = append(mismatches, m...)
		steps += n
	}
	return mismatches, steps
}

// TestGoCoreMatchesVectors replays the checked-in traces (whose expected decisions are written by
// hand from spec/protocol.md) against internal/proto.
func TestGoCoreMatchesVectors(t *testing.T) {
	m, steps := replayAll(t, protovec.GoCore())
	for _, x := range m {
		t.Error(x)
	}
	if steps < 50 {
		t.Fatalf("only %d decisions checked", steps)
	}
	t.Logf("%d decisions checked", steps)
}

// TestVectorsAreGenerated: the checked-in files are exactly what go run ./internal/proto/gen writes.
func TestVectorsAreGenerated(t *testing.T) {
	dir := t.TempDir()
	if err := protovec.Write(dir); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	have, _ := filepath.Glob(filepath.Join(vectorDir, "*.jsonl"))
	written := map[string]bool{}
	for _, w := range want {
		written[filepath.Base(w)] = true
	}
	for _, h := range have {
		if !written[filepath.Base(h)] {
			t.Errorf("%s is checked in but the generator does not write it: every vector file comes from internal/proto/protovec (and every SDK replays it)", filepath.Base(h))
		}
	}
	if len(want) != len(have) {
		t.Fatalf("%d files checked in, the generator writes %d: run go run ./internal/proto/gen", len(have), len(want))
	}
	for _, w := range want {
		a, _ := os.ReadFile(w)
		b, err := os.ReadFile(filepath.Join(vectorDir, filepath.Base(w)))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s differs from what the generator writes (%v): run go run ./internal/proto/gen", filepath.Base(w), err)
		}
	}
}

// TestVectorsCatchWrongCores: every mutated rule fails the replay (a checker that can fail).
func TestVectorsCatchWrongCores(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*protovec.Core)
		rule   string
	}{
		{"gate checks only epoch x-1", func(c *protovec.Core) {
			real := c.GateRecord
			c.GateRecord = func(tp *wire.Topic, drained, x, p int, f proto.PartitionOf, pos proto.Positions) (proto.Gate, error) {
				return real(tp, x-2, x, p, f, pos) // as if every epoch before x-1 were drained
			}
		}, "epoch-gating"},
		{"gate waits on its own partition too", func(c *protovec.Core) {
			real := c.GateRecord
			c.GateRecord = func(tp *wire.Topic, drained, x, p int, f proto.PartitionOf, pos proto.Positions) (proto.Gate, error) {
				return real(tp, drained, x, -1, f, pos)
			}
		}, "epoch-gating"},
		{"lease expiry without the skew bound", func(c *protovec.Core) {
			real := c.MayAcquire
			c.MayAcquire = func(me, owner string, end, now int64, _ time.Duration) bool { return real(me, owner, end, now, 0) }
		}, "lease-expiry"},
		{"keys assigned at the boundary", func(c *protovec.Core) {
			c.PastBoundary = func(_ *wire.Topic, q int, b uint64, pos proto.Positions, _ bool) bool { return pos(q) >= b }
		}, "keys-assigned-past-boundary"},
		{"retired partitions never leave", func(c *protovec.Core) {
			c.Assignable = func(tp *wire.Topic, _ proto.Positions) []int {
				var out []int
				for q := 0; q < tp.MaxPartitions(); q++ {
					out = append(out, q)
				}
				return out
			}
		}, "shrink-retirement"},
		{"final boundary from the first epoch", func(c *protovec.Core) {
			c.Assignable = func(tp *wire.Topic, pos proto.Positions) []int {
				var out []int
				for q := 0; q < tp.MaxPartitions(); q++ {
					if q < tp.Current().Partitions || pos(q) < tp.Epochs[0].Boundaries[q] {
						out = append(out, q)
					}
				}
				return out
			}
		}, "shrink-retirement"},
		{"a marker passed without keys revoked", func(c *protovec.Core) {
			real := c.FenceMarker
			c.FenceMarker = func(tp *wire.Topic, q int, seq uint64, fence int, done func(int) bool) proto.Marker {
				m := real(tp, q, seq, fence, done)
				m.Revoke = nil
				return m
			}
		}, "fence-markers"},
		{"keys revoked skipped at the start position", func(c *protovec.Core) {
			c.Passed = func(tp *wire.Topic, q int, start uint64) []int { return proto.Passed(tp, q, start+1) }
		}, "fence-markers"},
		{"re-sent sink by sink, not in send order", func(c *protovec.Core) {
			c.ResendOrder = func(seqs []uint64) []int {
				out := make([]int, len(seqs))
				for i := range out {
					out[i] = i
				}
				return out
			}
		}, "fence-resend-order"},
		{"search down to the sink's floor only", func(c *protovec.Core) {
			c.SearchFloor = func(floor uint64, _ []uint64) uint64 { return floor }
		}, "ambiguous-search-floor"},
		{"search a fenced partition from its last sequence", func(c *protovec.Core) {
			c.SearchTop = func(bool, uint64) (uint64, bool) { return 0, true }
		}, "ambiguous-search-floor"},
		{"batches without the per-key rule on a cluster", func(c *protovec.Core) {
			c.Batches = func(keys []string, keyless []bool, _ bool, size int) [][]int {
				return proto.Batches(keys, keyless, false, size)
			}
		}, "per-key-batches"},
		{"an anomaly ignored: the ambiguous sink goes on sending", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.anomaly = func(proto.SinkID) proto.StickyActions { return proto.StickyActions{} }
			})
		}, "sticky-ambiguity"},
		{"a newer epoch moves ambiguous records before their sink settled", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.newEpoch = func(e int) (proto.StickyActions, error) {
					a, err := m.Sticky.NewEpoch(e)
					for q := 0; q < 4; q++ { // as if every old sink were settled, nothing stored
						if b, err := m.Sticky.Settled(proto.SinkID{Epoch: m.epoch, Partition: q}, nil); err == nil {
							a.Send, a.Acked = append(a.Send, b.Send...), append(a.Acked, b.Acked...)
						}
					}
					return a, err
				}
			})
		}, "sticky-ambiguity"},
		{"a record settled as stored is re-sent", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.settled = func(id proto.SinkID, _, failed []uint64) (proto.StickyActions, error) {
					return m.Sticky.SettledFailing(id, nil, failed)
				}
			})
		}, "sticky-ambiguity"},
		{"one ambiguous sink holds back every partition", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.produce = func(seq uint64, key string) (proto.StickyActions, error) {
					a, err := m.Sticky.Produce(seq, key)
					if len(m.ambiguous) > 0 {
						a.Send = nil
					}
					return a, err
				}
			})
		}, "sticky-ambiguity"},
		{"after a fence the re-send starts when the first old sink settled", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.settled = func(id proto.SinkID, stored, failed []uint64) (proto.StickyActions, error) {
					a, err := m.Sticky.SettledFailing(id, stored, failed)
					for q := 0; m.fenced && q < 4; q++ { // the other old sinks taken as settled, nothing stored
						if b, err := m.Sticky.Settled(proto.SinkID{Epoch: m.epoch, Partition: q}, nil); err == nil {
							a.Send, a.Acked = append(a.Send, b.Send...), append(a.Acked, b.Acked...)
						}
					}
					return a, err
				}
			})
		}, "sticky-ambiguity"},
		{"a record failed in settling is re-sent", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.settled = func(id proto.SinkID, stored, _ []uint64) (proto.StickyActions, error) {
					return m.Sticky.SettledFailing(id, stored, nil)
				}
			})
		}, "sticky-permanent-failures"},
		{"a failure in settling holds back the records after it", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.settled = func(id proto.SinkID, stored, failed []uint64) (proto.StickyActions, error) {
					a, err := m.Sticky.SettledFailing(id, stored, failed)
					if len(a.Failed) > 0 {
						a.Send = nil
					}
					return a, err
				}
			})
		}, "sticky-permanent-failures"},
		{"a permanent failure wins over stored", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.settled = func(id proto.SinkID, stored, failed []uint64) (proto.StickyActions, error) {
					out := map[uint64]bool{}
					for _, q := range failed {
						out[q] = true
					}
					var st []uint64
					for _, q := range stored {
						if !out[q] {
							st = append(st, q)
						}
					}
					return m.Sticky.SettledFailing(id, st, failed)
				}
			})
		}, "sticky-permanent-failures"},
		{"a drop ignored: the record stays and is sent, settled or failed at close", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.drop = func([]uint64) proto.StickyActions { return proto.StickyActions{} }
			})
		}, "sticky-permanent-failures"},
		{"a drop fails every record it names (ambiguous, acknowledged, unknown)", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.drop = func(seqs []uint64) proto.StickyActions {
					m.Sticky.Drop(seqs)
					return proto.StickyActions{Failed: seqs}
				}
			})
		}, "sticky-permanent-failures"},
		{"a drop ends the sink's ambiguity", func(c *protovec.Core) {
			c.NewSticky = mutantSticky(func(m *stickyMutant) {
				m.drop = func(seqs []uint64) proto.StickyActions {
					a := m.Sticky.Drop(seqs)
					for id := range m.ambiguous { // as if the drop had settled every ambiguous sink, nothing stored
						if b, err := m.SettledFailing(id, nil, nil); err == nil {
							a.Send = append(a.Send, b.Send...)
						}
					}
					return a
				}
			})
		}, "sticky-permanent-failures"},
		{"the empty key treated as keyless", func(c *protovec.Core) {
			c.Batches = func(keys []string, keyless []bool, perKey bool, size int) [][]int {
				kl := make([]bool, len(keys))
				for i := range keys {
					kl[i] = keyless[i] || keys[i] == ""
				}
				return proto.Batches(keys, kl, perKey, size)
			}
		}, "per-key-batches"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := protovec.GoCore()
			tc.mutate(&c)
			m, _ := replayAll(t, c)
			found := false
			for _, x := range m {
				if x.Rule == tc.rule {
					found = true
				}
			}
			if !found {
				t.Fatalf("the vectors did not catch a core where %s (mismatches: %v)", tc.name, m)
			}
			t.Logf("caught: %s", strings.SplitN(m[0].String(), "\n", 2)[0])
		})
	}
}

// stickyMutant wraps proto.Sticky with one wrong decision (a field set by the mutant); the rest
// is the real machine. It notes the sinks anomalies made ambiguous and whether a newer epoch came.
type stickyMutant struct {
	*proto.Sticky
	epoch     int // the starting epoch
	fenced    bool
	ambiguous map[proto.SinkID]bool
	produce   func(uint64, string) (proto.StickyActions, error)
	anomaly   func(proto.SinkID) proto.StickyActions
	settled   func(id proto.SinkID, stored, failed []uint64) (proto.StickyActions, error)
	drop      func([]uint64) proto.StickyActions
	newEpoch  func(int) (proto.StickyActions, error)
}

func mutantSticky(set func(*stickyMutant)) func(int, proto.KeyPartition) protovec.StickyCore {
	return func(epoch int, f proto.KeyPartition) protovec.StickyCore {
		m := &stickyMutant{Sticky: proto.NewSticky(epoch, f), epoch: epoch, ambiguous: map[proto.SinkID]bool{}}
		m.produce, m.anomaly, m.settled, m.drop, m.newEpoch = m.Sticky.Produce, m.Sticky.Anomaly, m.Sticky.SettledFailing, m.Sticky.Drop, m.Sticky.NewEpoch
		set(m)
		return m
	}
}

func (m *stickyMutant) Produce(seq uint64, key string) (proto.StickyActions, error) {
	return m.produce(seq, key)
}

func (m *stickyMutant) Anomaly(id proto.SinkID) proto.StickyActions {
	m.ambiguous[id] = true
	return m.anomaly(id)
}

func (m *stickyMutant) SettledFailing(id proto.SinkID, stored, failed []uint64) (proto.StickyActions, error) {
	delete(m.ambiguous, id)
	return m.settled(id, stored, failed)
}

func (m *stickyMutant) Drop(seqs []uint64) proto.StickyActions { return m.drop(seqs) }

func (m *stickyMutant) NewEpoch(e int) (proto.StickyActions, error) {
	m.fenced = true
	return m.newEpoch(e)
}
