package stateful

import (
	"context"

	"pctl.dev/pctl/client"
)

// ReadChangelogEveryEpoch is ReadChangelog reading every stream from its start, every older
// layout included (the reader before client.ChangelogReadStart): the control of the backfill test.
func ReadChangelogEveryEpoch(ctx context.Context, c *client.Client, topic string, read map[int]uint64, index map[string]State) (map[string]State, int, error) {
	return readChangelog(ctx, c, topic, read, index, false)
}
