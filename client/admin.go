package client

import (
	"context"
	"errors"
	"fmt"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// Topic returns a topic's descriptor and its revision.
func (c *Client) Topic(ctx context.Context, name string) (*wire.Topic, uint64, error) {
	var r wire.TopicReply
	if _, err := c.request(ctx, wire.APITopicGet, wire.TopicRequest{Topic: name}, &r); err != nil {
		return nil, 0, err
	}
	return &r.Topic, r.Revision, nil
}

// Topics lists the topics.
func (c *Client) Topics(ctx context.Context) ([]wire.TopicSummary, error) {
	var r wire.TopicListReply
	_, err := c.request(ctx, wire.APITopicList, nil, &r)
	return r.Topics, err
}

// CreateTopic creates a topic (admin role).
func (c *Client) CreateTopic(ctx context.Context, req wire.CreateTopicRequest) (*wire.Topic, error) {
	var r wire.TopicReply
	if _, err := c.request(ctx, wire.AdminTopicNew, req, &r); err != nil {
		return nil, err
	}
	return &r.Topic, nil
}

// DeleteTopic deletes a topic and all its records (admin role).
func (c *Client) DeleteTopic(ctx context.Context, name string) error {
	_, err := c.request(ctx, wire.AdminTopicDel, wire.TopicRequest{Topic: name}, nil)
	return err
}

// Repartition starts an epoch change (admin role) and returns the descriptor once the new epoch
// is active.
func (c *Client) Repartition(ctx context.Context, req wire.RepartitionRequest) (*wire.Topic, error) {
	var r wire.TopicReply
	if _, err := c.request(ctx, wire.AdminTopicEdit, req, &r); err != nil {
		return nil, err
	}
	return &r.Topic, nil
}

// SetTopic changes a live topic's replicas and/or placement tags (admin role) and returns the
// descriptor once every partition stream has them.
func (c *Client) SetTopic(ctx context.Context, req wire.SetTopicRequest) (*wire.Topic, error) {
	var r wire.TopicReply
	if _, err := c.request(ctx, wire.AdminTopicSet, req, &r); err != nil {
		return nil, err
	}
	return &r.Topic, nil
}

// RetireEpochs deletes the records of a topic's epochs up to through (0: every ended epoch) once
// backfills have carried their keys forward and every consumer group is past them (admin role;
// spec/protocol.md §10.7), and returns the descriptor.
func (c *Client) RetireEpochs(ctx context.Context, topic string, through int) (*wire.Topic, error) {
	var r wire.TopicReply
	if _, err := c.request(ctx, wire.AdminTopicRetire, wire.RetireRequest{Topic: topic, Through: through}, &r); err != nil {
		return nil, err
	}
	return &r.Topic, nil
}

// Groups lists a topic's consumer groups and their committed positions.
func (c *Client) Groups(ctx context.Context, topic string) ([]wire.GroupInfo, error) {
	var r wire.GroupListReply
	_, err := c.request(ctx, wire.APIGroupList, wire.TopicRequest{Topic: topic}, &r)
	return r.Groups, err
}

// UploadPlugin uploads a module (admin role). The broker runs conformance and refuses a failing
// module; the *wire.RemoteError then carries the report in Detail.
func (c *Client) UploadPlugin(ctx context.Context, wasm []byte) (*wire.PluginInfo, error) {
	if max := c.nc.MaxPayload(); int64(len(wasm)) > max {
		return nil, fmt.Errorf("%w: the module is %d bytes, more than the server's max_payload of %d; raise max_payload (pctl serve uses 16 MiB)", wire.ErrBadRequest, len(wasm), max)
	}
	var r wire.PluginInfo
	if _, err := c.request(ctx, wire.AdminPluginPut, wasm, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PluginInfo describes a stored plugin or built-in.
func (c *Client) PluginInfo(ctx context.Context, ref string) (*wire.PluginInfo, error) {
	var r wire.PluginInfo
	if _, err := c.request(ctx, wire.APIPluginInfo, wire.PluginRequest{Plugin: ref}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Plugins lists the broker's plugins, built-ins included.
func (c *Client) Plugins(ctx context.Context) ([]wire.PluginInfo, error) {
	var r wire.PluginListReply
	_, err := c.request(ctx, wire.APIPluginList, nil, &r)
	return r.Plugins, err
}

// DeletePlugin deletes an uploaded plugin (admin role); the broker refuses while a topic uses it.
func (c *Client) DeletePlugin(ctx context.Context, digest string) error {
	_, err := c.request(ctx, wire.AdminPluginDel, wire.PluginRequest{Plugin: digest}, nil)
	return err
}

// Module returns a plugin's bytes by digest (or built-in name), verified against the digest and
// cached for the life of the client.
func (c *Client) Module(ctx context.Context, ref string) ([]byte, error) {
	c.mu.Lock()
	if b, ok := c.modules[ref]; ok {
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	m, err := c.request(ctx, wire.APIPluginGet, wire.PluginRequest{Plugin: ref}, nil)
	if err != nil {
		return nil, err
	}
	d := runtime.Digest(m.Data)
	if want := m.Header.Get("Pctl-Digest"); want != d || (len(ref) == 64 && ref != d) {
		return nil, fmt.Errorf("%w: plugin %s: the bytes received hash to %s: refusing them", wire.ErrInternal, ref, d)
	}
	c.mu.Lock()
	if _, builtin := plugins.Builtin(ref); builtin {
		c.modules[ref] = m.Data // an uploaded plugin's name may mean other bytes later: not cached
	}
	c.modules[d] = m.Data
	c.mu.Unlock()
	return m.Data, nil
}

// partitionerFor is what the client's producers and consumers partition with: with
// Options.NativeBuiltins, the Go implementation of a built-in whose module p is exactly, without
// config (spec/builtins.md, the native fast path); otherwise p's module (Partitioner).
func (c *Client) partitionerFor(ctx context.Context, p wire.Partitioner) (partitioner.Partitioner, error) {
	if c.opts.NativeBuiltins {
		if n, ok := partitioner.NativeFor(p.Digest, p.Config); ok {
			return n, nil
		}
	}
	return c.Partitioner(ctx, p)
}

// Partitioner returns the partitioner of an epoch: its module fetched by digest (cached and
// verified), instantiated with the epoch's config.
func (c *Client) Partitioner(ctx context.Context, p wire.Partitioner) (*partitioner.WASM, error) {
	key := p.Digest + "/" + string(p.Config)
	c.mu.Lock()
	w, ok := c.parts[key]
	c.mu.Unlock()
	if ok {
		return w, nil
	}
	wasm, err := c.Module(ctx, p.Digest)
	if err != nil {
		return nil, err
	}
	mod, err := c.rt.Load(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: plugin %s: %v", wire.ErrPluginFailed, p.Name, err)
	}
	w, err = partitioner.NewWASM(ctx, mod, p.Config, runtime.PoolOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: plugin %s: %v", wire.ErrPluginFailed, p.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if prev, ok := c.parts[key]; ok {
		w.Close()
		return prev, nil
	}
	c.parts[key] = w
	return w, nil
}

// IsPermission reports whether err is a permission refusal.
func IsPermission(err error) bool { return errors.Is(err, wire.ErrPermission) }
