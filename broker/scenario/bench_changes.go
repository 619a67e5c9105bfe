package scenario

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// ChangeSize is an epoch change of a jump topic from From to To partitions.
type ChangeSize struct{ From, To int }

// ChangePair is one size's epoch change measured cold and warm in the same run: Cold is the
// first change on a freshly started broker (empty data directory, nothing cached, the first
// streams the server creates after start), Warm the same change on a second topic of the same
// size on that broker afterwards, the first one deleted (so the server holds as many streams as
// for the cold one). A change's time is the repartition request's, answered when the new epoch
// is active. Ratio is Warm/Cold: what being first after start costs, so a change time from one
// run is read against its own cold baseline.
type ChangePair struct {
	From, To   int
	Warm, Cold time.Duration
	Ratio      float64
}

// changePairs measures every size of cfg.Changes, one fresh broker each, in cfg.DataDir.
func changePairs(ctx context.Context, cfg BenchConfig) ([]ChangePair, error) {
	var out []ChangePair
	for i, sz := range cfg.Changes {
		if sz.From < 1 || sz.To <= sz.From {
			return nil, fmt.Errorf("%w: epoch change %d -> %d: give a size that grows, from >= 1", wire.ErrBadRequest, sz.From, sz.To)
		}
		p, err := changePair(ctx, filepath.Join(cfg.DataDir, fmt.Sprintf("changes-%d", i)), sz, cfg.SyncInterval)
		if err != nil {
			return nil, fmt.Errorf("epoch change %d -> %d: %w", sz.From, sz.To, err)
		}
		cfg.Logf("epoch change %d -> %d: cold %v, warm %v", sz.From, sz.To, p.Cold, p.Warm)
		out = append(out, p)
	}
	return out, nil
}

func changePair(ctx context.Context, dir string, sz ChangeSize, sync time.Duration) (ChangePair, error) {
	p := ChangePair{From: sz.From, To: sz.To}
	b, err := broker.Start(ctx, broker.Config{DataDir: dir, Listen: "127.0.0.1:0", SyncInterval: sync})
	if err != nil {
		return p, err
	}
	defer b.Close()
	admin, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin), Timeout: 10 * time.Minute})
	if err != nil {
		return p, err
	}
	defer admin.Close()
	change := func(topic string) (time.Duration, error) {
		if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: sz.From, Partitioner: "jump"}); err != nil {
			return 0, err
		}
		start := time.Now()
		if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: sz.To}); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	if p.Cold, err = change("cold"); err != nil {
		return p, err
	}
	if err := admin.DeleteTopic(ctx, "cold"); err != nil {
		return p, err
	}
	if p.Warm, err = change("warm"); err != nil {
		return p, err
	}
	p.Ratio = float64(p.Warm) / float64(p.Cold)
	return p, nil
}
