package proto

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestStickyCheck drives the check as a producer would, with decisions that follow the rule of
// spec/protocol.md §5.1.2 and ones that break it; the verdicts are the spec's text, not the
// machine's code: "while it lasts, the sink sends nothing more", "the other partitions' sinks
// go on", "re-sent ... in their original send order", "the producer collects every sink's
// records only once that sink settled", "a record settled as stored is acknowledged where it is".
func TestStickyCheck(t *testing.T) {
	s10, s11, s20 := SinkID{1, 0}, SinkID{1, 1}, SinkID{2, 0}
	// sent: records produced to sink id and transmitted there, in order.
	sent := func(c *StickyCheck, id SinkID, seqs ...uint64) {
		for _, seq := range seqs {
			c.Produce(seq, id.Epoch, id.Partition)
		}
		for _, seq := range seqs {
			c.Transmit(seq, id)
		}
	}
	// resend: the producer re-sends under epoch, placing each record as parts says.
	resend := func(c *StickyCheck, epoch int, parts map[uint64]int) {
		c.Resend(epoch, func(seq uint64) (int, error) { return parts[seq], nil })
	}
	// fenced: records 1 in (1,1) and 2 in (1,0) in flight, then epoch 2.
	fenced := func(c *StickyCheck) {
		sent(c, s11, 1)
		sent(c, s10, 2)
		c.NewEpoch(2)
	}
	for _, tc := range []struct {
		name string
		run  func(c *StickyCheck)
		want string // "" no violation; else a piece of the message
	}{
		{"clean sends and acknowledgements", func(c *StickyCheck) {
			sent(c, s10, 1, 2)
			c.Acked(s10, 1, 2)
		}, ""},
		{"a later record sent while its sink is ambiguous", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Anomaly(s10)
			c.Produce(2, 1, 0)
			c.Transmit(2, s10)
		}, "record 2 transmitted to (1,0) (its sink (1,0) is ambiguous)"},
		{"a queued record sent while its sink is ambiguous", func(c *StickyCheck) {
			c.Produce(1, 1, 0)
			c.Produce(2, 1, 0)
			c.Transmit(1, s10)
			c.Anomaly(s10)
			c.Transmit(2, s10)
		}, "record 2 transmitted to (1,0) (the machine holds it ambiguous)"},
		{"another partition goes on while one is ambiguous", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Anomaly(s10)
			sent(c, s11, 2)
			c.Acked(s11, 2)
		}, ""},
		{"after settling, the rest first, in order", func(c *StickyCheck) {
			sent(c, s10, 1, 2)
			c.Anomaly(s10)
			c.Produce(3, 1, 0)
			c.Settled(s10, []uint64{1}, nil)
			c.Transmit(2, s10)
			c.Transmit(3, s10)
			c.Acked(s10, 2, 3)
		}, ""},
		{"after settling, a later record ahead of one not stored", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Anomaly(s10)
			c.Produce(2, 1, 0)
			c.Settled(s10, nil, nil)
			c.Transmit(2, s10)
		}, "record 2 transmitted to (1,0); the machine sends record 1 there next"},
		{"a record settled as stored is sent again", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Anomaly(s10)
			c.Settled(s10, []uint64{1}, nil)
			c.Transmit(1, s10)
		}, "record 1 transmitted to (1,0) (the machine does not hold it)"},
		{"a record failed in settling is not sent again, the next one is", func(c *StickyCheck) {
			sent(c, s10, 1, 2)
			c.Anomaly(s10)
			c.Settled(s10, nil, []uint64{1})
			c.Transmit(2, s10)
		}, ""},
		{"an acknowledgement taken while settling counts as settled stored", func(c *StickyCheck) {
			sent(c, s10, 1, 2)
			c.Anomaly(s10)
			c.Acked(s10, 1) // a flow ack that came while settling
			c.Settled(s10, nil, nil)
			c.Transmit(2, s10)
		}, ""},
		{"an acknowledgement of a record never sent there", func(c *StickyCheck) {
			c.Produce(1, 1, 0)
			c.Acked(s10, 1)
		}, "record 1 acknowledged in (1,0), where it was not transmitted"},
		{"settled as stored, never in flight (during a move: the producer's own classification)", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Acked(s10, 1)
			sent(c, s10, 2)
			c.NewEpoch(2)
			c.Settled(s10, []uint64{1, 2}, nil)
			c.HandBack(s10)
			resend(c, 2, map[uint64]int{})
		}, "settled [1 2] as stored; the machine acknowledges [2]"},
		{"a newer epoch: re-sent in send order once every old sink handed back", func(c *StickyCheck) {
			fenced(c)
			c.Produce(3, 0, -1)
			c.Anomaly(s10)
			c.Settled(s10, nil, nil)
			c.HandBack(s10)
			c.HandBack(s11)
			resend(c, 2, map[uint64]int{1: 0, 2: 0, 3: 0})
			c.Transmit(1, s20)
			c.Transmit(2, s20)
			c.Transmit(3, s20)
			c.Acked(s20, 1, 2, 3)
		}, ""},
		{"a newer epoch: re-sent before every old sink settled", func(c *StickyCheck) {
			fenced(c)
			c.HandBack(s10)
			resend(c, 2, map[uint64]int{1: 0, 2: 0})
		}, "while the machine waits for sinks (1,1) to settle"},
		{"a newer epoch: an old sink sends on after its fence", func(c *StickyCheck) {
			c.Produce(1, 1, 0)
			c.Produce(2, 1, 0)
			c.Transmit(1, s10)
			c.NewEpoch(2)
			c.Transmit(2, s10)
		}, "record 2 transmitted to (1,0) (the machine holds it ambiguous)"},
		{"a newer epoch: re-sent out of send order", func(c *StickyCheck) {
			fenced(c)
			c.HandBack(s10)
			c.HandBack(s11)
			resend(c, 2, map[uint64]int{1: 0, 2: 0})
			c.Transmit(2, s20)
		}, "record 2 transmitted to (2,0); the machine sends record 1 there next"},
		{"a newer epoch: a record queued in the old epoch during the move", func(c *StickyCheck) {
			c.Produce(1, 1, 0)
			c.NewEpoch(2)
			c.Produce(2, 1, 0)
		}, "record 2 queued on (1,0) while the producer moves to epoch 2"},
		{"close ends the check", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Close()
			c.Acked(s10, 1)
			c.Transmit(9, s10)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			c := NewStickyCheck(1, func(msg string) { got = append(got, msg) })
			tc.run(c)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violation reported for a decision the rule allows:\n%s", got[0])
			case tc.want != "" && len(got) == 0:
				t.Fatalf("no violation reported; want one saying %q", tc.want)
			case tc.want != "" && !strings.Contains(got[0], tc.want):
				t.Fatalf("violation %q; want one saying %q", got[0], tc.want)
			case len(got) > 1:
				t.Fatalf("%d violations reported; the check stops at the first", len(got))
			}
		})
	}
	var nilCheck *StickyCheck
	if _, on := nilCheck.Next(s10); on {
		t.Fatal("a nil check decides what a sink sends next")
	}
	nilCheck.Produce(1, 1, 0) // a producer without the check: no-ops
	nilCheck.Transmit(1, s10)
}

// TestStickyCheckDecides: the decisions the producer takes from the machine (Next, Resend), with
// the expected values from spec/protocol.md §5.1.2, not from the machine's code: "while it lasts,
// the sink sends nothing more", "only a record settled as not stored moves, ahead of every
// record sent after it", "re-send them in their original send order", each record to its key's
// partition in the new epoch; a record the producer cannot place fails, the others go on.
func TestStickyCheckDecides(t *testing.T) {
	s10, s11 := SinkID{1, 0}, SinkID{1, 1}
	fail := func(msg string) { t.Fatalf("violation: %s", msg) }
	next := func(c *StickyCheck, id SinkID) uint64 {
		seq, on := c.Next(id)
		if !on {
			t.Fatal("the check is off")
		}
		return seq
	}
	transmit := func(c *StickyCheck, id SinkID, seqs ...uint64) {
		for _, seq := range seqs {
			if got := next(c, id); got != seq {
				t.Fatalf("the machine sends record %d to (%d,%d) next; want %d", got, id.Epoch, id.Partition, seq)
			}
			c.Transmit(seq, id)
		}
	}
	t.Run("nothing past an ambiguous batch, then the rest first", func(t *testing.T) {
		c := NewStickyCheck(1, fail)
		c.Produce(1, 1, 0)
		c.Produce(2, 1, 0)
		transmit(c, s10, 1, 2)
		c.Anomaly(s10)
		c.Produce(3, 1, 0)
		c.Produce(4, 1, 1)
		if got := next(c, s10); got != 0 {
			t.Fatalf("the machine sends record %d to an ambiguous sink; want nothing", got)
		}
		transmit(c, s11, 4) // the other partitions go on
		c.Settled(s10, []uint64{1}, nil)
		transmit(c, s10, 2, 3)
		if got := next(c, s10); got != 0 {
			t.Fatalf("the machine sends record %d after everything went; want nothing", got)
		}
	})
	t.Run("re-sent in send order, a record that cannot be placed fails", func(t *testing.T) {
		c := NewStickyCheck(1, fail)
		for _, r := range []struct {
			seq uint64
			q   int
		}{{1, 0}, {2, 1}, {3, 0}, {4, 1}, {5, 0}} {
			c.Produce(r.seq, 1, r.q)
			transmit(c, SinkID{1, r.q}, r.seq)
		}
		c.Acked(s10, 1)
		c.NewEpoch(2)
		c.Produce(6, 0, -1) // taken during the move
		c.Settled(s10, []uint64{3}, nil)
		c.HandBack(s10)
		c.Settled(s11, nil, nil)
		c.HandBack(s11)
		var placed []uint64
		parts := map[uint64]int{2: 0, 4: 2, 5: 1, 6: 2}
		plan, lost, ok := c.Resend(2, func(seq uint64) (int, error) {
			placed = append(placed, seq)
			if seq == 4 {
				return 0, errors.New("the partitioner failed")
			}
			return parts[seq], nil
		})
		if !ok {
			t.Fatal("Resend decided nothing")
		}
		// Records 1 and 3 are stored (acknowledged, settled as stored): 2, 4, 5 and 6 remain, in
		// send order, placed in that order; 4 cannot be placed and fails.
		if fmt.Sprint(placed) != "[2 4 5 6]" {
			t.Fatalf("placed %v; want [2 4 5 6] (send order)", placed)
		}
		if fmt.Sprint(lost) != "[4]" {
			t.Fatalf("lost %v; want [4]", lost)
		}
		want := []Placed{{2, 2, 0}, {5, 2, 1}, {6, 2, 2}}
		if fmt.Sprint(plan) != fmt.Sprint(want) {
			t.Fatalf("plan %v; want %v", plan, want)
		}
		transmit(c, SinkID{2, 0}, 2)
		transmit(c, SinkID{2, 1}, 5)
		transmit(c, SinkID{2, 2}, 6)
	})
	t.Run("off decides nothing", func(t *testing.T) {
		c := NewStickyCheck(1, fail)
		c.Close()
		if _, on := c.Next(s10); on {
			t.Fatal("a closed check decides what a sink sends next")
		}
		if _, _, ok := c.Resend(2, nil); ok {
			t.Fatal("a closed check decides a re-send")
		}
	})
}
