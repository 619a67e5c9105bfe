package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/conformance"
	"pctl.dev/pctl/internal/logging"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// apiPluginUpload stores a module that passes conformance, under its digest.
func (b *Broker) apiPluginUpload(ctx context.Context, m *nats.Msg) (any, error) {
	wasm := m.Data
	if len(wasm) == 0 {
		return nil, fmt.Errorf("%w: the upload request carries no module bytes", wire.ErrBadRequest)
	}
	digest := runtime.Digest(wasm)
	if info, err := b.pluginInfo(ctx, digest); err == nil {
		return info, nil // already stored (or a built-in): uploading is idempotent
	}
	rep, err := conformance.Check(ctx, wasm, conformance.Options{Keys: b.cfg.ConformanceKeys})
	if err != nil {
		return nil, fmt.Errorf("%w: conformance could not run: %v", wire.ErrInternal, err)
	}
	if !rep.Passed {
		var lines []string
		for _, r := range rep.Results {
			if r.Status == conformance.StatusFail {
				lines = append(lines, r.Name+": "+r.Reason)
			}
		}
		b.cfg.Logger.Warn("plugin rejected", "digest", digest, "name", rep.Module.Name, "size", len(wasm), "verdict", "fail", "failed_checks", logging.Strings(failedChecks(rep)))
		return nil, &detailed{err: fmt.Errorf("%w: module sha256:%s failed conformance: %s; run 'pctl conformance FILE.wasm' for the full report", wire.ErrPluginRejected, digest, strings.Join(lines, "; ")), detail: rep}
	}
	mod, err := b.rt.Load(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", wire.ErrPluginRejected, err)
	}
	info := wire.PluginInfo{Digest: digest, Name: mod.Metadata.Name, Version: mod.Metadata.Version, Size: len(wasm),
		Profile: string(mod.Profile), Properties: mod.Metadata.Properties}
	if r, ok := rep.Result("ancestry"); ok && r.Status == conformance.StatusPass {
		info.AncestryVerified = true
	}
	meta, _ := json.Marshal(info)
	objMeta := map[string]string{"info": string(meta)}
	if report, err := json.Marshal(rep); err == nil {
		objMeta[reportMeta] = string(report) // status.go shows it
	}
	// A store the cluster does not answer yet (just started, or electing the bucket's leader:
	// "no response from stream", or a timeout) is tried again within the request; a put under
	// the digest's name is idempotent, so a try that was stored after all does no harm.
	giveUp := time.Now().Add(createPatience)
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		pctx, cancel := context.WithTimeout(ctx, 2*opTimeout) // one try; the bound leaves room for more
		_, err = b.objs.Put(pctx, jetstream.ObjectMeta{Name: digest, Description: info.Name + " " + info.Version,
			Metadata: objMeta}, bytes.NewReader(wasm))
		cancel()
		if err == nil || !writeUnanswered(err) || ctx.Err() != nil || time.Now().Add(pause).After(giveUp) {
			break
		}
		b.cfg.Logger.Warn("plugin upload: the plugins bucket did not answer; retrying", "digest", digest, "error", err, "pause", pause)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: store plugin: %v", wire.ErrUnavailable, err)
	}
	b.cfg.Logger.Info("plugin uploaded", "digest", digest, "name", info.Name, "version", info.Version, "size", len(wasm), "profile", info.Profile,
		"verdict", "pass", "warnings", logging.Strings(warnedChecks(rep)), "ancestry_verified", info.AncestryVerified)
	return info, nil
}

// pluginInfo describes a built-in or an uploaded plugin by name or digest.
func (b *Broker) pluginInfo(ctx context.Context, ref string) (*wire.PluginInfo, error) {
	wasm, err := b.moduleBytes(ctx, ref)
	if err != nil {
		return nil, err
	}
	digest := runtime.Digest(wasm)
	for _, name := range plugins.BuiltinNames() {
		if bw, _ := plugins.Builtin(name); runtime.Digest(bw) == digest {
			mod, err := b.rt.Load(ctx, bw)
			if err != nil {
				return nil, err
			}
			return &wire.PluginInfo{Digest: digest, Name: name, Version: mod.Metadata.Version, Size: len(bw), Profile: string(mod.Profile),
				Properties: mod.Metadata.Properties, Builtin: true, AncestryVerified: mod.HasAncestry}, nil
		}
	}
	oi, err := b.objs.GetInfo(ctx, digest)
	if errors.Is(err, jetstream.ErrObjectNotFound) && b.pluginStoredAtLeader(ctx, digest) {
		for pause := 20 * time.Millisecond; errors.Is(err, jetstream.ErrObjectNotFound) && pause < 3*time.Second; pause *= 2 {
			time.Sleep(pause) // uploaded through another broker; this replica lags (moduleBytes)
			oi, err = b.objs.GetInfo(ctx, digest)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: plugin %s: %v", wire.ErrNotFound, digest, err)
	}
	var info wire.PluginInfo
	if err := json.Unmarshal([]byte(oi.Metadata["info"]), &info); err != nil {
		return nil, fmt.Errorf("%w: plugin %s has corrupt metadata", wire.ErrInternal, digest)
	}
	return &info, nil
}

func (b *Broker) apiPluginInfo(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.PluginRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	info, err := b.pluginInfo(ctx, req.Plugin)
	if err != nil {
		return nil, err
	}
	info.UsedBy = b.usedBy(ctx, info.Digest)
	return info, nil
}

func (b *Broker) apiPluginGet(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.PluginRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	wasm, err := b.moduleBytes(ctx, req.Plugin)
	if err != nil {
		return nil, err
	}
	h := nats.Header{}
	h.Set("Pctl-Digest", runtime.Digest(wasm))
	return rawReply{data: wasm, headers: h}, nil
}

func (b *Broker) apiPluginList(ctx context.Context, m *nats.Msg) (any, error) {
	reply := wire.PluginListReply{Plugins: []wire.PluginInfo{}}
	for _, name := range plugins.BuiltinNames() {
		if info, err := b.pluginInfo(ctx, name); err == nil {
			reply.Plugins = append(reply.Plugins, *info)
		}
	}
	lister, err := b.objs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	for _, oi := range lister {
		var info wire.PluginInfo
		if json.Unmarshal([]byte(oi.Metadata["info"]), &info) == nil {
			reply.Plugins = append(reply.Plugins, info)
		}
	}
	used := b.usage(ctx)
	for i := range reply.Plugins {
		reply.Plugins[i].UsedBy = used[reply.Plugins[i].Digest]
	}
	sort.SliceStable(reply.Plugins, func(i, j int) bool {
		if reply.Plugins[i].Builtin != reply.Plugins[j].Builtin {
			return reply.Plugins[i].Builtin
		}
		return reply.Plugins[i].Name < reply.Plugins[j].Name
	})
	return reply, nil
}

func (b *Broker) apiPluginDelete(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.PluginRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	info, err := b.pluginInfo(ctx, req.Plugin)
	if err != nil {
		return nil, err
	}
	if info.Builtin {
		return nil, fmt.Errorf("%w: %s is a built-in; built-ins cannot be deleted", wire.ErrBadRequest, info.Name)
	}
	if users := b.usedBy(ctx, info.Digest); len(users) > 0 {
		return nil, fmt.Errorf("%w: plugin %s (sha256:%s) is used by topic(s) %s; consumers need every epoch's function, so delete those topics first", wire.ErrInUse, info.Name, info.Digest[:12], strings.Join(users, ", "))
	}
	if err := b.objs.Delete(ctx, info.Digest); err != nil {
		return nil, fmt.Errorf("%w: %v", wire.ErrUnavailable, err)
	}
	b.cfg.Logger.Info("plugin deleted", "digest", info.Digest, "name", info.Name, "version", info.Version)
	return struct{}{}, nil
}

// usage maps digests to the topics (any epoch, or an epoch change in progress) that use them.
func (b *Broker) usage(ctx context.Context) map[string][]string {
	out := map[string][]string{}
	lister, err := b.topic.ListKeys(ctx)
	if err != nil {
		return out
	}
	for k := range lister.Keys() {
		t, _, err := b.getTopic(ctx, k)
		if err != nil {
			continue
		}
		seen := map[string]bool{}
		for _, e := range t.Epochs {
			seen[e.Partitioner.Digest] = true
		}
		if t.Change != nil {
			seen[t.Change.Partition.Digest] = true
		}
		for d := range seen {
			out[d] = append(out[d], t.Name)
		}
	}
	for d := range out {
		sort.Strings(out[d])
	}
	return out
}

func (b *Broker) usedBy(ctx context.Context, digest string) []string { return b.usage(ctx)[digest] }

// reportMeta is the plugin object's metadata key holding the conformance report of its upload.
const reportMeta = "conformance"

func failedChecks(rep *conformance.Report) []string { return checksWith(rep, conformance.StatusFail) }
func warnedChecks(rep *conformance.Report) []string { return checksWith(rep, conformance.StatusWarn) }

func checksWith(rep *conformance.Report, st conformance.Status) []string {
	var out []string
	for _, r := range rep.Results {
		if r.Status == st {
			out = append(out, r.Name)
		}
	}
	return out
}
