// Package natsver is the nats-server version pctl's clients need, and the check that refuses an
// older server (spec/protocol.md §5.1 for the producer: fast batches; §6.1 for a consumer: the
// conditioned write that proves a group absent, which a server older than 2.11 ignores). The
// producer (internal/produce) and the consumer (package client) share it, so both refuse with
// one minimum, one comparison and one form of message.
package natsver

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// Min is the oldest nats-server pctl's producer and consumer run on (spec/protocol.md §5.1, §6.1).
const Min = "2.14.0"

// minMajor and minMinor are Min's numbers: the comparison looks at major.minor only.
const minMajor, minMinor = 2, 14

// AtLeast reports whether a "major.minor.patch[-suffix]" version (a leading "v" allowed) is at
// least major.minor. The patch and a pre-release suffix are not compared: "2.14.0-RC.1" is 2.14.
// A version it cannot read is not at least anything.
func AtLeast(v string, major, minor int) bool {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(strings.SplitN(parts[1], "-", 2)[0])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// Check is the decision of Require on a server's INFO version v: nil when v is at least Min,
// else wire.ErrUnavailable naming the server (url), v, the minimum and what to do. who is the
// client part that needs it ("pctl's producer"), why the feature and the spec section.
func Check(v, url, who, why string) error {
	if AtLeast(v, minMajor, minMinor) {
		return nil
	}
	return fmt.Errorf("%w: the server at %s runs nats-server %q; %s needs %s or later on every node (%s): upgrade the NATS servers", wire.ErrUnavailable, url, v, who, Min, why)
}

// Require refuses the server nc is connected to when it reports a version older than Min.
func Require(nc *nats.Conn, who, why string) error {
	return Check(nc.ConnectedServerVersion(), nc.ConnectedUrlRedacted(), who, why)
}
