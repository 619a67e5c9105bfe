package client

import (
	"context"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
)

// PartitionerFor is what the client's producers and consumers partition p with (the native fast
// path's switch, admin.go), for TestNativeBuiltins.
func (c *Client) PartitionerFor(ctx context.Context, p wire.Partitioner) (partitioner.Partitioner, error) {
	return c.partitionerFor(ctx, p)
}
