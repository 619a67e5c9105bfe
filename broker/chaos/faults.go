package chaos

import (
	"context"
	"fmt"
	"math/rand"
	"time"

	"pctl.dev/pctl/broker/wire"
)

// FaultKind names a fault.
type FaultKind string

// The faults. A node fault hits one node at a time (so that the cluster keeps a majority) and
// ends with the node back: restarted on its data, resumed, or reconnected.
const (
	// KillStreamLeader kill -9s the node leading a partition stream of the current epoch, and
	// restarts it after Fault.For.
	KillStreamLeader FaultKind = "kill-stream-leader"
	// KillMetaLeader kill -9s the JetStream meta leader (stream creation, the cluster's
	// assignments), and restarts it after Fault.For.
	KillMetaLeader FaultKind = "kill-meta-leader"
	// KillClientNode kill -9s the node a producer is connected to.
	KillClientNode FaultKind = "kill-client-node"
	// KillBrokerNode kill -9s the node a broker is connected to.
	KillBrokerNode FaultKind = "kill-broker-node"
	// PauseNode SIGSTOPs a partition stream's leader node for Fault.For, then SIGCONTs it: it
	// holds its connections open and answers nothing, as in a long GC pause or a frozen VM.
	PauseNode FaultKind = "pause-node"
	// IsolateNode cuts every route of a partition stream's leader node for Fault.For (a network
	// partition: the node keeps its clients), then heals them.
	IsolateNode FaultKind = "isolate-node"
	// KillBroker kill -9s a broker process Fault.Delay after an epoch change was requested
	// (Fault.During names the change, 1-based), and starts it again after Fault.For. With
	// several brokers, which one handles the change is the queue group's choice.
	KillBroker FaultKind = "kill-broker"
)

// Kinds lists every fault, in the order fixed seeds cycle through them.
var Kinds = []FaultKind{KillStreamLeader, PauseNode, KillBroker, KillMetaLeader, IsolateNode, KillClientNode, KillBrokerNode}

// Fault is one scheduled fault.
type Fault struct {
	Kind FaultKind
	At   time.Duration // from the traffic's start (node faults)
	For  time.Duration // down, paused or cut for this long
	// During and Delay place a KillBroker: Delay after change During (1-based) was requested.
	During int
	Delay  time.Duration
	// Partition chooses the partition stream whose leader a stream fault hits (modulo the
	// current partition count).
	Partition int
}

func (f Fault) String() string {
	if f.Kind == KillBroker {
		return fmt.Sprintf("%s %v into change %d, down %v", f.Kind, f.Delay, f.During, f.For)
	}
	return fmt.Sprintf("%s at %v for %v", f.Kind, f.At, f.For)
}

// Change is one scheduled epoch change.
type Change struct {
	At          time.Duration
	Partitions  int    // 0: keep
	Partitioner string // "": keep
}

func (c Change) String() string {
	switch {
	case c.Partitions > 0 && c.Partitioner != "":
		return fmt.Sprintf("%d partitions of %s", c.Partitions, c.Partitioner)
	case c.Partitions > 0:
		return fmt.Sprintf("%d partitions", c.Partitions)
	default:
		return "swap to " + c.Partitioner
	}
}

// Plan is a run's schedule.
type Plan struct {
	Changes []Change
	Faults  []Fault
}

// Schedule returns the plan for a seed: two or three epoch changes (grow, shrink, swap the
// partition function, in a seeded mix) and three faults. The first fault's kind cycles through
// Kinds with the seed, so that any len(Kinds) consecutive seeds run every kind; the others are
// drawn at random. Node faults do not overlap (one node is down at a time); a KillBroker rides
// on a change.
func Schedule(seed int64, traffic time.Duration, brokers int) Plan {
	rng := rand.New(rand.NewSource(seed))
	var p Plan
	// Changes, spread over the traffic's middle.
	seqs := [][]Change{
		{{Partitions: 6}, {Partitioner: "kafka-murmur2"}},
		{{Partitions: 3}, {Partitions: 6}},
		{{Partitioner: "kafka-murmur2"}, {Partitions: 2}, {Partitions: 5}},
		{{Partitions: 8}, {Partitions: 3, Partitioner: "kafka-murmur2"}},
		{{Partitioner: "jump"}, {Partitions: 6}},
	}
	seq := seqs[rng.Intn(len(seqs))]
	for i, c := range seq {
		slot := traffic / time.Duration(len(seq)+1)
		c.At = slot*time.Duration(i+1) + time.Duration(rng.Int63n(int64(slot/3))) - slot/6
		p.Changes = append(p.Changes, c)
	}
	kinds := []FaultKind{Kinds[int(uint64(seed)%uint64(len(Kinds)))]}
	for len(kinds) < 3 {
		kinds = append(kinds, Kinds[rng.Intn(len(Kinds))])
	}
	// Node faults in windows of the traffic, one per window: they never overlap.
	nodeFaults := 0
	for _, k := range kinds {
		if k != KillBroker {
			nodeFaults++
		}
	}
	window := (traffic - 2*time.Second) / time.Duration(max(1, nodeFaults))
	w := 0
	for _, k := range kinds {
		if k == KillBroker {
			p.Faults = append(p.Faults, Fault{Kind: k, During: 1 + rng.Intn(len(p.Changes)),
				Delay: time.Duration(rng.Intn(400)) * time.Millisecond, For: time.Second + time.Duration(rng.Intn(2000))*time.Millisecond})
			continue
		}
		dur := 2*time.Second + time.Duration(rng.Intn(3000))*time.Millisecond
		if k == PauseNode || k == IsolateNode {
			dur = 3*time.Second + time.Duration(rng.Intn(4000))*time.Millisecond
		}
		offset := time.Duration(rng.Int63n(int64(window / 4)))
		at := time.Second + window*time.Duration(w) + offset
		w++
		p.Faults = append(p.Faults, Fault{Kind: k, At: at, For: min(dur, window-offset-200*time.Millisecond), Partition: rng.Intn(16)})
	}
	_ = brokers
	return p
}

// inject runs one fault and returns what happened. It returns when the target is back.
func (r *run) inject(f Fault) FaultRecord {
	rec := FaultRecord{Fault: f, Began: time.Since(r.t0)}
	fail := func(err error) FaultRecord {
		rec.Err = err.Error()
		rec.Ended = time.Since(r.t0)
		r.cfg.Logf("chaos: %s not injected: %v", f.Kind, err)
		return rec
	}
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	node := -1
	switch f.Kind {
	case KillStreamLeader, PauseNode, IsolateNode:
		stream, err := r.currentStream(ctx, f.Partition)
		if err != nil {
			return fail(err)
		}
		if node, err = r.cluster.StreamLeader(ctx, stream); err != nil {
			return fail(err)
		}
		rec.Target = fmt.Sprintf("%s, leader of %s", r.cluster.Name(node), stream)
	case KillMetaLeader:
		var err error
		if node, err = r.cluster.MetaLeader(ctx); err != nil {
			return fail(err)
		}
		rec.Target = r.cluster.Name(node) + ", meta leader"
	case KillClientNode:
		r.mu.Lock()
		c := r.named["chaos-c0"]
		r.mu.Unlock()
		if c != nil {
			node = r.cluster.Index(c.Conn().ConnectedServerName())
		}
		rec.Target = ", producer c0's node"
		if node < 0 { // c0 is done (or reconnecting): any client of the run's
			nodes, err := r.cluster.NodesWithClient(ctx, "chaos-")
			if err != nil || len(nodes) == 0 {
				return fail(fmt.Errorf("no client is connected (%v)", err))
			}
			node, rec.Target = nodes[0], ", a client's node"
		}
		rec.Target = r.cluster.Name(node) + rec.Target
	case KillBrokerNode:
		nodes, err := r.cluster.NodesWithClient(ctx, "pctl-broker")
		if err != nil || len(nodes) == 0 {
			return fail(fmt.Errorf("no node has a broker connection (%v)", err))
		}
		node = nodes[int(f.At)%len(nodes)]
		rec.Target = r.cluster.Name(node) + ", a broker's node"
	case KillBroker:
		b := r.brokers[(f.During+int(f.Delay))%len(r.brokers)]
		b.faultMu.Lock()
		defer b.faultMu.Unlock()
		rec.Began = time.Since(r.t0)
		rec.Target = b.name
		r.cfg.Logf("chaos: %s: kill -9 %s", f.Kind, b.name)
		b.kill()
		time.Sleep(f.For)
		// As a supervisor (systemd's Restart=always) would, start it until it runs; a start that
		// fails is recorded (Result.SetupRetries).
		if err := r.setup("restart broker "+b.name+" after kill -9", b.start); err != nil {
			r.problem("%s did not start again after %s: %v", b.name, f.Kind, err)
		}
		rec.Ended = time.Since(r.t0)
		return rec
	}
	r.cfg.Logf("chaos: %s: %s for %v", f.Kind, rec.Target, f.For)
	switch f.Kind {
	case PauseNode:
		if err := r.cluster.Stop(node); err != nil {
			return fail(err)
		}
		time.Sleep(f.For)
		if err := r.cluster.Cont(node); err != nil {
			r.problem("SIGCONT %s: %v", r.cluster.Name(node), err)
		}
	case IsolateNode:
		if err := r.cluster.Isolate(node); err != nil {
			return fail(err)
		}
		time.Sleep(f.For)
		if err := r.cluster.Heal(); err != nil {
			r.problem("heal: %v", err)
		}
	default:
		if err := r.cluster.Kill(node); err != nil {
			return fail(err)
		}
		time.Sleep(f.For)
		if err := r.cluster.Restart(node); err != nil {
			r.problem("%s did not start again after %s: %v", r.cluster.Name(node), f.Kind, err)
		}
	}
	// The fault ends when the cluster is whole again (the node caught up).
	hctx, hcancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer hcancel()
	if err := r.cluster.WaitHealthy(hctx); err != nil {
		r.problem("the cluster was not healthy within 30s after %s on %s: %v", f.Kind, rec.Target, err)
	}
	rec.Ended = time.Since(r.t0)
	return rec
}

// currentStream returns the stream of partition q (mod the partition count) of the topic's
// latest epoch.
func (r *run) currentStream(ctx context.Context, q int) (string, error) {
	desc, _, err := r.admin.Topic(ctx, Topic)
	if err != nil {
		return "", fmt.Errorf("topic: %w", err)
	}
	n := desc.Epochs[len(desc.Epochs)-1].Partitions
	return wire.StreamName(Topic, q%n), nil
}
