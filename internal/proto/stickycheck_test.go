package proto

import (
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
		{"settled as stored, never in flight", func(c *StickyCheck) {
			sent(c, s10, 1)
			c.Acked(s10, 1)
			sent(c, s10, 2)
			c.Anomaly(s10)
			c.Settled(s10, []uint64{1, 2}, nil)
		}, "settled [1 2] as stored; the machine acknowledges [2]"},
		{"a newer epoch: re-sent in send order once every old sink handed back", func(c *StickyCheck) {
			fenced(c)
			c.Produce(3, 0, -1)
			c.Anomaly(s10)
			c.Settled(s10, nil, nil)
			c.HandBack(s10)
			c.HandBack(s11)
			c.Regather(2, map[uint64]int{1: 0, 2: 0, 3: 0}, nil)
			c.Transmit(1, s20)
			c.Transmit(2, s20)
			c.Transmit(3, s20)
			c.Acked(s20, 1, 2, 3)
		}, ""},
		{"a newer epoch: re-sent before every old sink settled", func(c *StickyCheck) {
			fenced(c)
			c.HandBack(s10)
			c.Regather(2, map[uint64]int{1: 0, 2: 0}, nil)
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
			c.Regather(2, map[uint64]int{1: 0, 2: 0}, nil)
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
	nilCheck.Produce(1, 1, 0) // a producer without the check: no-ops
	nilCheck.Transmit(1, s10)
}
