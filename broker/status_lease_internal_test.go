package broker

import (
	"testing"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// TestStatusLeaseOwnerHonoursTheSkewBound (issue 12: "the status page ignores the skew bound"):
// the status page shows a partition's owner while its lease is live as another member counts it,
// now < lease_end + S with S = min(1 s, session / 6) = 1 s for the default 6 s session (spec
// §6.3, §9), not only while now < lease_end. The expected owners come from that rule worked out
// by hand for each row; the rows from the lease end to 999 ms past it are the ones the old check
// (lease_end > now) got wrong: it showed no owner for a lease every other member still honours.
func TestStatusLeaseOwnerHonoursTheSkewBound(t *testing.T) {
	now := time.UnixMilli(1_764_590_000_000)
	end := now.UnixMilli()
	cases := []struct {
		name     string
		owner    string
		leaseEnd int64
		want     string
	}{
		{"lease ends in 2 s", "m1", end + 2000, "m1"},
		{"lease ends now", "m1", end, "m1"},
		{"1 ms past its end", "m1", end - 1, "m1"},
		{"999 ms past its end", "m1", end - 999, "m1"},
		{"exactly S past its end", "m1", end - 1000, ""},
		{"2 s past its end", "m1", end - 2000, ""},
		{"no owner (released)", "", end + 2000, ""},
		{"never leased", "", 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseOwner(wire.PartitionState{Owner: tc.owner, LeaseEnd: tc.leaseEnd}, now); got != tc.want {
				t.Fatalf("owner %q, lease_end %+d ms from now: status shows %q, want %q", tc.owner, tc.leaseEnd-end, got, tc.want)
			}
		})
	}
}
