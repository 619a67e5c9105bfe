package clientconf

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
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
// 1, two backfills ago; k16..k19 in phase 3, in epoch 2 while its backfill was held).
func compactKeys(phase int) int {
	switch {
	case phase <= 2:
		return numKeys
	case phase <= 3:
		return numKeys - 4
	}
	return numKeys - 8
}

// heldPhase is the phase written while the first backfill is held at its start.
const heldPhase = 3

// compactLines are phase i of the compacted row: a value for every key of the phase, then for
// every key a second value or, for every fourth key (another quarter each phase), a tombstone;
// the held phase also deletes k16 and k18, which no later phase writes.
func compactLines(phase int) []line {
	pad := func(s string) string { return s + strings.Repeat(".", max(0, valueBytes-len(s))) }
	n := compactKeys(phase)
	out := make([]line, 0, 2*n)
	for k := 0; k < n; k++ {
		out = append(out, line{key: fmt.Sprintf("k%02d", k), value: pad(fmt.Sprintf("%da-k%02d-", phase, k))})
	}
	for k := 0; k < n; k++ {
		v := pad(fmt.Sprintf("%db-k%02d-", phase, k))
		if (k+phase)%4 == 0 || (phase == heldPhase && k >= numKeys-8 && k%2 == 0) {
			v = tombstoneMarker
		}
		out = append(out, line{key: fmt.Sprintf("k%02d", k), value: v})
	}
	return out
}

var compactedScenario = scenario{name: "compacted", description: "compacted topic: updates and tombstones through grow 3->5 and a function swap with backfill; a fresh current-epoch group sees each key's latest value",
	members: 2, compact: true, hold: true, dups: dupFail, prodArgs: []string{"--tombstone-marker", tombstoneMarker},
	run: func(r *run) error {
		changes := []struct {
			what string
			req  wire.RepartitionRequest
		}{
			{"grow 3 -> 5", wire.RepartitionRequest{Partitions: 5}},
			{"swap kafka-murmur2 -> librdkafka-consistent", wire.RepartitionRequest{Partitioner: "librdkafka-consistent"}},
		}
		for i := 1; i <= compactPhases; i++ {
			from := len(r.prod.sent)
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
			if i == 2 {
				// The grow's backfill is held at its start while the next phase is written: its
				// tombstones must carry the hold the descriptor gives while a backfill runs.
				select {
				case <-r.held:
				case <-time.After(catchUpWait):
					return fmt.Errorf("the backfill of the grow did not start within %v", catchUpWait)
				case <-r.ctx.Done():
					return r.ctx.Err()
				}
				time.Sleep(500 * time.Millisecond) // the producer learns the new descriptor (its event)
			}
			if i == heldPhase {
				if err := r.caughtUp(); err != nil {
					return err
				}
				if err := r.checkHeldTombstones(from, len(r.prod.sent)); err != nil {
					return err
				}
				r.releaseBackfill()
				r.fault("phase %d: written while the backfill was held; released", i)
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

// holdFirstBackfill is the broker's step hook of the compacted row: the first backfill waits at
// its start until releaseBackfill.
func (r *run) holdFirstBackfill() func(topic, step string) error {
	r.held, r.release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func(topic, step string) error {
		if step != "backfill-start" {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if first {
			close(r.held)
			select {
			case <-r.release:
			case <-r.ctx.Done():
			}
		}
		return nil
	}
}

func (r *run) releaseBackfill() {
	if r.release != nil {
		r.relOnce.Do(func() { close(r.release) })
	}
}

// checkHeldTombstones checks the acknowledged tombstones of lines [from, to) (written while the
// backfill is held; all but the last half phase have results) as stored: each is its key's last record in the current epoch, with Nats-TTL the
// descriptor's delete_retention_ms / 1000, which is the hold while a backfill runs
// (spec/protocol.md §10.2). A producer that kept the retention it read before the epoch change
// gives them the topic's own retention: they would expire before a long backfill reaches their
// keys, and the keys' old values would be copied back. A wrong TTL is a failure of the row; an
// error stops it.
func (r *run) checkHeldTombstones(from, to int) error {
	deadline := time.Now().Add(catchUpWait)
	for {
		res, _, _ := r.prod.snapshot()
		n := 0
		for p := from + 1; p <= to; p++ {
			if _, ok := res[uint64(p)]; ok {
				n++
			}
		}
		if n >= to-from-(numKeys+1)/2 { // a client may hold back up to half a phase of its input (§3)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the producer reported %d of the %d results of the held phase within %v", n, to-from, catchUpWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	desc, _, err := r.admin.Topic(r.ctx, r.topic)
	if err != nil {
		return err
	}
	if desc.Compact == nil || !desc.Compact.Held() {
		return fmt.Errorf("the descriptor holds no tombstones while the backfill is held: %+v", desc.Compact)
	}
	want := fmt.Sprint(desc.Compact.DeleteRetentionMS / 1000)
	cur := desc.Current()
	part, _, err := r.partitionFunc()
	if err != nil {
		return err
	}
	res, _, _ := r.prod.snapshot()
	wrong, checked, ex := 0, 0, []string{}
	for p := from + 1; p <= to; p++ {
		l := r.prod.sent[p-1]
		if l.value != tombstoneMarker || !res[uint64(p)].Acked {
			continue
		}
		q, err := part(cur.Epoch, []byte(l.key))
		if err != nil {
			return err
		}
		s, err := r.admin.JetStream().Stream(r.ctx, wire.StreamName(r.topic, q))
		if err != nil {
			return err
		}
		m, err := s.GetLastMsgForSubject(r.ctx, wire.RecordSubject(r.topic, cur.Epoch, q, true, []byte(l.key)))
		checked++
		var got string
		switch {
		case err != nil:
			got = fmt.Sprintf("not stored (%v)", err)
		case m.Header.Get(wire.HeaderTombstone) == "" || m.Header.Get(wire.HeaderSeq) != fmt.Sprint(p):
			got = fmt.Sprintf("another record (pseq %s, tombstone %q)", m.Header.Get(wire.HeaderSeq), m.Header.Get(wire.HeaderTombstone))
		case m.Header.Get(wire.HeaderTTL) != want:
			got = fmt.Sprintf("Nats-TTL %q", m.Header.Get(wire.HeaderTTL))
		default:
			continue
		}
		wrong++
		if len(ex) < 3 {
			ex = append(ex, fmt.Sprintf("key %q pseq %d: %s", l.key, p, got))
		}
	}
	if checked == 0 {
		return fmt.Errorf("no tombstone of the held phase was acknowledged")
	}
	r.logf("held phase: %d acknowledged tombstones checked, %d without Nats-TTL %s", checked, wrong, want)
	if wrong > 0 {
		r.failf("tombstone TTL: %d of %d tombstones written while a backfill ran are not stored with Nats-TTL %s (the descriptor's delete_retention_ms / 1000: the hold, spec/protocol.md §10.2): %s",
			wrong, checked, want, strings.Join(ex, "; "))
	}
	return nil
}
