package client

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker/wire"
)

// Reader timing. A reader's pull requests expire after readerExpiry and carry a heartbeat every
// readerHeartbeat; nats.go re-creates the server-side consumer when two heartbeats are missed.
// readerStall is the member's own backstop (see Consumer.watchdog): a reader that handed nothing
// over for that long while its stream holds records past the member's position is replaced.
const (
	readerExpiry    = 3 * time.Second
	readerHeartbeat = time.Second
	readerStall     = 4 * time.Second
	// readerOpenTimeout bounds the request that creates a reader's consumer.
	readerOpenTimeout = 5 * time.Second
)

// partitionReader reads one partition stream in order, from a start sequence, and hands the
// messages over one at a time on msgs. It is a JetStream ordered consumer (an ephemeral R1 pull
// consumer that nats.go re-creates after a gap, a missed heartbeat or a reconnect), with Next
// called in a goroutine of its own and without a time limit.
//
// Why a goroutine: nats.go checks for missed heartbeats only inside one Next call, from its
// start; a reader that calls Next with a short time limit (it once used one heartbeat, to look
// around between records) never lets a Next call last the two heartbeats the check waits for, so a
// pull request lost with the node that held its consumer was never noticed and the partition was
// not read again (issue 10). Here Next waits as long as it must, and the worker waits on msgs,
// its context and its own clock at once.
//
// The consumer filters on the topic's subjects (pctl.data.<topic>.>): every message of a partition
// stream matches, and the filter travels in the consumer-create subject, which is what lets a
// consumer credential be limited to one topic's streams (spec/protocol.md §8).
type partitionReader struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
	it     jetstream.MessagesContext
	msgs   chan jetstream.Msg
	errc   chan error
	quit   chan struct{}
	once   sync.Once
}

// openReader creates the server-side consumer and starts reading at sequence start.
func openReader(ctx context.Context, js jetstream.JetStream, topic string, partition int, start uint64) (*partitionReader, error) {
	stream := wire.StreamName(topic, partition)
	// The create request is bounded here, not by ctx: a member's context usually carries a
	// far deadline (or the caller's whole run), and jetstream adds its own 5s only to a context
	// without one. A create request answered by no one (it reached a node whose stream leader
	// just died) otherwise waited for that far deadline, and the partition was read by no one
	// (issue 10, chaos seeds 3 and 5 under load: workers blocked in OrderedConsumer for the rest
	// of the run). A create that times out is retried by the worker.
	cctx, cancel := context.WithTimeout(ctx, readerOpenTimeout)
	defer cancel()
	cons, err := js.OrderedConsumer(cctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{wire.DataPrefix + "." + topic + ".>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		// A few attempts, then the error comes back here and the worker retries on its own
		// schedule (and can be stopped meanwhile).
		MaxResetAttempts: 3,
	})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullExpiry(readerExpiry), jetstream.PullHeartbeat(readerHeartbeat))
	if err != nil {
		deleteConsumer(js, stream, cons)
		return nil, err
	}
	r := &partitionReader{js: js, stream: stream, cons: cons, it: it, msgs: make(chan jetstream.Msg), errc: make(chan error, 1), quit: make(chan struct{})}
	go r.loop()
	return r, nil
}

func (r *partitionReader) loop() {
	for {
		msg, err := r.it.Next()
		if err != nil {
			select {
			case r.errc <- err:
			case <-r.quit:
			}
			return
		}
		select {
		case r.msgs <- msg:
		case <-r.quit:
			return
		}
	}
}

// close stops the reader without waiting: stopping an ordered consumer can wait for a
// re-creation attempt in progress (up to its request timeout), and a worker must never wait for
// that. The server-side consumer is deleted in the background, best effort (otherwise it lingers
// until its inactivity threshold).
func (r *partitionReader) close() {
	r.once.Do(func() {
		close(r.quit)
		go func() {
			r.it.Stop()
			deleteConsumer(r.js, r.stream, r.cons)
		}()
	})
}

func deleteConsumer(js jetstream.JetStream, stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = js.DeleteConsumer(ctx, stream, info.Name)
}
