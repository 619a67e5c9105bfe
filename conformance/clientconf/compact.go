package clientconf

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// The compacted row (spec/client-conformance.md §4, `compacted`): a compacted topic, many updates
// per key and tombstones, two epoch changes with backfill in the middle of traffic; then a fresh
// group that reads the current epoch alone must see exactly each key's latest value and no
// deleted key's value (spec/protocol.md §10.5).

// tombstoneMarker is the value that makes a producer line a tombstone (the producer command gets
// --tombstone-marker with it; spec/client-conformance.md §1).
const tombstoneMarker = "~TOMBSTONE~"

// compactPhases is the number of phases of the compacted row; changes come after phases 2 and 4.
const compactPhases = 6

// compactKeys is how many keys phase i writes (k00 up): later phases leave the last keys alone,
// so that the current epoch holds them only through the backfills (k20..k23 last written in epoch
// 1, two backfills ago; k16..k19 in epoch 2).
func compactKeys(phase int) int {
	switch {
	case phase <= 2:
		return numKeys
	case phase <= 4:
		return numKeys - 4
	}
	return numKeys - 8
}

// compactLines are phase i of the compacted row: a value for every key of the phase, then for
// every key a second value or, for every fourth key (another quarter each phase), a tombstone.
func compactLines(phase int) []line {
	pad := func(s string) string { return s + strings.Repeat(".", max(0, valueBytes-len(s))) }
	n := compactKeys(phase)
	out := make([]line, 0, 2*n)
	for k := 0; k < n; k++ {
		out = append(out, line{key: fmt.Sprintf("k%02d", k), value: pad(fmt.Sprintf("%da-k%02d-", phase, k))})
	}
	for k := 0; k < n; k++ {
		v := pad(fmt.Sprintf("%db-k%02d-", phase, k))
		if (k+phase)%4 == 0 {
			v = tombstoneMarker
		}
		out = append(out, line{key: fmt.Sprintf("k%02d", k), value: v})
	}
	return out
}

var compactedScenario = scenario{name: "compacted", description: "compacted topic: updates and tombstones through grow 3->5 and a function swap with backfill; a fresh current-epoch group sees each key's latest value",
	members: 2, compact: true, dups: dupFail, prodArgs: []string{"--tombstone-marker", tombstoneMarker},
	run: func(r *run) error {
		changes := []struct {
			what string
			req  wire.RepartitionRequest
		}{
			{"grow 3 -> 5", wire.RepartitionRequest{Partitions: 5}},
			{"swap kafka-murmur2 -> librdkafka-consistent", wire.RepartitionRequest{Partitioner: "librdkafka-consistent"}},
		}
		for i := 1; i <= compactPhases; i++ {
			if err := r.prod.write(compactLines(i)); err != nil {
				return err
			}
			if i == 2 || i == 4 {
				c := changes[i/2-1]
				r.sleepUpTo(50 * time.Millisecond)
				c.req.Topic = r.topic
				if err := r.repartition(c.req); err != nil {
					return fmt.Errorf("%s: %w", c.what, err)
				}
				r.fault("phase %d: %s (backfill)", i, c.what)
			}
			if i < compactPhases {
				if err := r.caughtUp(); err != nil {
					return err
				}
			}
		}
		return r.waitBackfilled()
	},
	after: readCurrentEpoch,
}

// repartition asks for an epoch change, again while the previous change's backfill runs (the
// broker refuses a change then: change_in_progress).
func (r *run) repartition(req wire.RepartitionRequest) error {
	deadline := time.Now().Add(catchUpWait)
	for {
		_, err := r.admin.Repartition(r.ctx, req)
		if err == nil || !errors.Is(err, wire.ErrChangeInProgress) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitBackfilled waits until no epoch change or backfill of the topic runs.
func (r *run) waitBackfilled() error {
	deadline := time.Now().Add(catchUpWait)
	for {
		desc, _, err := r.admin.Topic(r.ctx, r.topic)
		if err == nil && desc.Change == nil && desc.Backfilling() == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the backfill did not end within %v (%v)", catchUpWait, err)
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readCurrentEpoch runs, after the producer is done and the live group stopped, one member of a
// new group that starts at the current epoch (--from current-epoch), until it has delivered
// every key's latest record or is silent for 20 s; it is then stopped (SIGTERM).
func readCurrentEpoch(r *run) error {
	res, _, _ := r.prod.snapshot()
	want := latestAcked(r.prod.sent, res)
	argv := append(append([]string(nil), r.opts.Consumer...), "--server", r.url(), "--creds", broker.CredsPath(r.dataDir, broker.RoleConsumer),
		"--topic", r.topic, "--group", r.group+"-fresh", "--member", "m-fresh", "--from", "current-epoch", "--heartbeat", heartbeat)
	m, err := startMember(argv, r.env(), r.dir, "m-fresh")
	if err != nil {
		return err
	}
	r.fresh = m
	deadline := time.Now().Add(drainWait)
	last, lastAt := -1, time.Now()
	for time.Now().Before(deadline) && time.Since(lastAt) < 20*time.Second && r.ctx.Err() == nil && m.alive() {
		got := map[string]uint64{}
		ds := m.deliveries()
		for _, d := range ds {
			if k, ok := d.key(); ok && d.PSeq > got[string(k)] {
				got[string(k)] = d.PSeq
			}
		}
		done := true
		for k, w := range want {
			if got[k] < w.pseq {
				done = false
				break
			}
		}
		if done {
			break
		}
		if len(ds) != last {
			last, lastAt = len(ds), time.Now()
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // a duplicate or a stale copy, if any, would show now
	if !m.alive() {
		return fmt.Errorf("the current-epoch member exited by itself (%v); stderr: %s", m.waitErr, m.stderrTail(4))
	}
	if !m.stop(syscall.SIGTERM, stopWait) {
		r.failf("member m-fresh did not exit within %v of SIGTERM", stopWait)
	} else if m.waitErr != nil {
		r.failf("member m-fresh exited with %v after SIGTERM (want 0); stderr: %s", m.waitErr, m.stderrTail(4))
	}
	return nil
}

// keyState is a key's latest acknowledged record, by the producer's line order.
type keyState struct {
	pseq      uint64
	value     string
	tombstone bool
}

// latestAcked gives every key its last acknowledged line (one producer: line order is the key's
// order).
func latestAcked(sent []line, res map[uint64]result) map[string]keyState {
	out := map[string]keyState{}
	for i, l := range sent {
		p := uint64(i + 1)
		if l.noKey || !res[p].Acked {
			continue
		}
		out[l.key] = keyState{pseq: p, value: l.value, tombstone: l.value == tombstoneMarker}
	}
	return out
}

// checkCurrentEpoch checks what a group that read only the current epoch (epoch current)
// delivered against every key's latest acknowledged record: each live key exactly once with its
// latest value, no deleted key with a value (its tombstone, flagged, may come: it is retained),
// nothing of an older epoch, nothing twice. It returns the failures, each with up to three
// examples.
func checkCurrentEpoch(want map[string]keyState, got []delivery, current int) []string {
	kinds := map[string][]string{}
	add := func(kind, ex string) { kinds[kind] = append(kinds[kind], ex) }
	seen := map[string]bool{}
	for _, d := range got {
		k, keyed := d.key()
		if !keyed {
			add("keyless records (a compacted topic has none)", fmt.Sprintf("pseq %d", d.PSeq))
			continue
		}
		key := string(k)
		if d.Epoch != current {
			add("records of an older epoch (the group starts at the current epoch)", fmt.Sprintf("key %q pseq %d of epoch %d", key, d.PSeq, d.Epoch))
		}
		if seen[key] {
			add("keys delivered twice", fmt.Sprintf("key %q again (pseq %d)", key, d.PSeq))
			continue
		}
		seen[key] = true
		w, ok := want[key]
		switch {
		case !ok:
			add("keys never acknowledged", fmt.Sprintf("key %q pseq %d", key, d.PSeq))
		case w.tombstone && !d.Tombstone:
			add("deleted keys resurrected", fmt.Sprintf("key %q deleted by pseq %d, delivered with the value of pseq %d", key, w.pseq, d.PSeq))
		case !w.tombstone && d.Tombstone:
			add("live keys delivered as deleted", fmt.Sprintf("key %q: a tombstone (pseq %d), its latest is the value of pseq %d", key, d.PSeq, w.pseq))
		case d.PSeq != w.pseq:
			add("stale records (not the key's latest)", fmt.Sprintf("key %q: pseq %d, its latest is pseq %d", key, d.PSeq, w.pseq))
		case !w.tombstone && (d.Value == nil || *d.Value != w.value):
			add("values that differ from the one sent", fmt.Sprintf("key %q pseq %d: %.20q", key, d.PSeq, deref(d.Value)))
		}
	}
	for key, w := range want {
		if !w.tombstone && !seen[key] {
			add("live keys missing", fmt.Sprintf("key %q (latest pseq %d)", key, w.pseq))
		}
	}
	var out []string
	for kind, exs := range kinds {
		sort.Strings(exs)
		out = append(out, fmt.Sprintf("current epoch: %d %s: %s", len(exs), kind, strings.Join(head(exs), "; ")))
	}
	sort.Strings(out)
	return out
}

func deref(s *string) string {
	if s == nil {
		return "<none>"
	}
	return *s
}

// caughtUpKeys waits until the group delivered, for every key, its latest record among the first
// upto lines, or a later one (compaction may have removed the former before the group read it).
func (r *run) caughtUpKeys(upto int) error {
	want := map[string]uint64{}
	for i, l := range r.prod.sent[:max(0, upto)] {
		want[l.key] = uint64(i + 1)
	}
	deadline := time.Now().Add(catchUpWait)
	for {
		behind := r.keysBehind(want)
		if behind == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group has not delivered the latest of the first %d records for %d of %d keys within %v (%d written); producer stderr: %s",
				upto, behind, len(want), catchUpWait, len(r.prod.sent), r.prod.stderrTail(3))
		}
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// keysBehind counts the keys whose highest delivered record (of this run's producer) is below
// want's.
func (r *run) keysBehind(want map[string]uint64) int {
	got := map[string]uint64{}
	for _, m := range r.members {
		for _, d := range m.deliveries() {
			if k, ok := d.key(); ok && d.Producer == r.prod.id && d.PSeq > got[string(k)] {
				got[string(k)] = d.PSeq
			}
		}
	}
	n := 0
	for k, p := range want {
		if got[k] < p {
			n++
		}
	}
	return n
}
