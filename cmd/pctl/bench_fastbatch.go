package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"pctl.dev/pctl/internal/produce"
)

// The raw fast-batch baseline of `pctl bench produce` (issue 17): the records published as
// JetStream fast batches (nats-server 2.14+, spec/protocol.md §5.1.1) with the same headers as
// the raw async baseline, by the least code that follows the rules pctl's producer follows: per
// partition one batch open at a time, of at most rawBatchMax records, committed with an
// end-of-batch, with at most rawBatchWindow messages beyond the last flow acknowledgement; the
// next batch of a partition starts at the PubAck. It settles nothing and verifies nothing: any
// anomaly (a gap, an error, a short count) fails the run.
const (
	rawBatchMax    = 4096
	rawBatchWindow = 1024
	rawBatchFlow   = 256
	rawBatchWait   = 30 * time.Second
)

// fastBatchReply is what the baseline reads of a server reply to a batch message.
type fastBatchReply struct {
	Type   string `json:"type"` // "ack", "gap", "err"; "" for a PubAck or a refusal
	Seq    uint64 `json:"seq"`
	Stream string `json:"stream"`
	Count  uint64 `json:"count"`
	Error  *struct {
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

func (pb *produceBench) runRawBatch(ctx context.Context, round int) (time.Duration, error) {
	opts := []nats.Option{nats.Name("pctl bench raw fast batch")}
	if pb.creds != "" {
		o, err := nats.NkeyOptionFromSeed(pb.creds)
		if err != nil {
			return 0, err
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(pb.url, opts...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	// The records of each partition, in send order (setup computed their subjects).
	bySubject := map[string][]int{}
	var subjects []string
	for i, s := range pb.subject {
		if _, ok := bySubject[s]; !ok {
			subjects = append(subjects, s)
		}
		bySubject[s] = append(bySubject[s], i)
	}
	id := "rawfb" + strconv.Itoa(round) + nuid.Next()
	type sub struct {
		inbox string
		ch    chan *nats.Msg
		s     *nats.Subscription
	}
	subs := make([]sub, len(subjects))
	for i := range subs {
		subs[i].inbox = nc.NewInbox()
		subs[i].ch = make(chan *nats.Msg, 4*rawBatchMax)
		if subs[i].s, err = nc.ChanSubscribe(subs[i].inbox+".>", subs[i].ch); err != nil {
			return 0, err
		}
		defer subs[i].s.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(subjects))
	start := time.Now()
	for i, subject := range subjects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = pb.rawBatches(ctx, nc, subject, subs[i].inbox, subs[i].ch, bySubject[subject], id)
		}()
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return d, nil
}

// rawBatches publishes one partition's records (indices into pb.subject) as consecutive fast
// batches and waits for the last PubAck.
func (pb *produceBench) rawBatches(ctx context.Context, nc *nats.Conn, subject, inbox string, replies chan *nats.Msg, recs []int, id string) error {
	wait := func(what string) (fastBatchReply, error) {
		var r fastBatchReply
		select {
		case m := <-replies:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return r, fmt.Errorf("raw fast batch to %s: no responders", subject)
			}
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return r, fmt.Errorf("raw fast batch to %s: reply %q: %v", subject, m.Data, err)
			}
			if r.Error != nil || r.Type == "gap" || r.Type == "err" {
				return r, fmt.Errorf("raw fast batch to %s: %s", subject, m.Data)
			}
			return r, nil
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(rawBatchWait):
			return r, fmt.Errorf("raw fast batch to %s: no %s within %v", subject, what, rawBatchWait)
		}
	}
	for len(recs) > 0 {
		n := min(len(recs), rawBatchMax)
		batch := nuid.Next()
		var acked uint64
		for s := 1; s <= n; s++ {
			for uint64(s)-acked > rawBatchWindow {
				r, err := wait("flow acknowledgement")
				if err != nil {
					return err
				}
				if r.Type == "ack" && r.Seq > acked {
					acked = r.Seq
				}
			}
			i := recs[s-1]
			op := 1
			switch {
			case n == 1:
				op = 2 // a batch of one record commits itself
			case s == 1:
				op = 0
			}
			m := nats.NewMsg(subject)
			m.Data = pb.value
			produce.SetIdentity(m.Header, pb.keys[i%len(pb.keys)], false, id, uint64(i+1), "0123456789abcdef0123456789abcdef")
			m.Reply = fmt.Sprintf("%s.%s.%d.fail.%d.%d.$FI", inbox, batch, rawBatchFlow, s, op)
			if err := nc.PublishMsg(m); err != nil {
				return err
			}
		}
		if n > 1 {
			eob := &nats.Msg{Subject: subject, Reply: fmt.Sprintf("%s.%s.%d.fail.%d.3.$FI", inbox, batch, rawBatchFlow, n+1)}
			if err := nc.PublishMsg(eob); err != nil {
				return err
			}
		}
		for {
			r, err := wait("PubAck")
			if err != nil {
				return err
			}
			if r.Stream == "" {
				continue // a flow acknowledgement
			}
			if r.Count != uint64(n) {
				return fmt.Errorf("raw fast batch to %s: PubAck counts %d of %d records", subject, r.Count, n)
			}
			break
		}
		recs = recs[n:]
	}
	return nil
}
