package crosslang

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
)

// TestStickyGroupAcrossLanguages: one sticky group (spec/protocol.md §6.2.1) whose members are
// processes in every language — Go (`pctl consume --assignor sticky`) and every SDK's consume
// command with --assignor sticky — on a linear-murmur2 topic of 4 partitions that grows to 8
// while a producer writes, once with each SDK as the leader that writes g.assignment (every
// other member follows its record), and then loses a member; the expansion must move no key between members: the leader's record says
// moved 0, every key is delivered by one member only, and `pctl verify` finds every acknowledged
// record delivered in per-key order. Before the SDKs implemented sticky they refused to join
// (code unsupported), and a member that assigned by modulo beside them would move keys.
func TestStickyGroupAcrossLanguages(t *testing.T) {
	sdks := groupLanguages(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Each SDK in turn leads (its member's name sorts first, §6.2.1) and creates the group, so
	// that each writes the records the others follow, the expansion's included; Go leads when no
	// SDK takes part (client/ tests Go as the leader).
	leaders := []*sdk{nil}
	if len(sdks) > 0 {
		leaders = nil
		for i := range sdks {
			leaders = append(leaders, &sdks[i])
		}
	}
	for _, leader := range leaders {
		name := "go"
		if leader != nil {
			name = leader.name
		}
		t.Run(name+"-leads", func(t *testing.T) { stickyExpansion(t, ctx, b, sdks, leader) })
	}
}

func stickyExpansion(t *testing.T, ctx context.Context, b *broker.Broker, sdks []sdk, leader *sdk) {
	admin := connect(t, b, broker.RoleAdmin)
	lead := "go"
	if leader != nil {
		lead = leader.name
	}
	topic, group, keys := "xs-"+lead, "sticky-"+lead, 60
	desc, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: topic, Partitions: 4, Partitioner: "linear-murmur2"})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.JetStream().KeyValue(ctx, "pctl-groups")
	if err != nil {
		t.Fatal(err)
	}
	// Every round the leaders write, as a watch sees it (the bucket keeps one revision), so that a
	// failure can say what came between two records the test read.
	var roundsMu sync.Mutex
	var rounds []string
	if w, err := kv.Watch(ctx, wire.AssignmentKey(desc.ID, group)); err == nil {
		defer func() { _ = w.Stop() }()
		go func() {
			for e := range w.Updates() {
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				var a wire.Assignment
				if json.Unmarshal(e.Value(), &a) == nil {
					roundsMu.Lock()
					rounds = append(rounds, fmt.Sprintf("round %d: members %v, owners %v, partitions %d", a.Round, a.Members, a.Owners, len(a.Partitions)))
					roundsMu.Unlock()
				}
			}
		}()
	}
	seenRounds := func() string {
		roundsMu.Lock()
		defer roundsMu.Unlock()
		return strings.Join(rounds, "; ")
	}
	record := func() *wire.Assignment {
		e, err := kv.Get(ctx, wire.AssignmentKey(desc.ID, group))
		if errors.Is(err, jetstream.ErrKeyNotFound) || err != nil {
			return nil
		}
		var a wire.Assignment
		if json.Unmarshal(e.Value(), &a) != nil {
			t.Fatalf("g.assignment is not an assignment record: %s", e.Value())
		}
		return &a
	}
	// settled reports whether every partition of the record is leased by the member the record gives it.
	settled := func(a *wire.Assignment, n int) bool {
		if a == nil || len(a.Partitions) != n {
			return false
		}
		for _, q := range a.Partitions {
			e, err := kv.Get(ctx, wire.PartitionKey(desc.ID, group, q))
			if err != nil {
				return false
			}
			var ps wire.PartitionState
			if json.Unmarshal(e.Value(), &ps) != nil || ps.Owner != a.Owner(q) {
				return false
			}
		}
		return true
	}
	dir := t.TempDir()

	// The leader's member creates the group (g.assignor sticky); the others ask for sticky too.
	memberName := func(s *sdk) string {
		lang := "go"
		if s != nil {
			lang = s.name
		}
		if s == leader {
			return "a-" + lang + "-1" // sorts before go-1, java-1, node-1, python-1
		}
		return lang + "-1"
	}
	members := []*memberProc{startStickyMember(t, dir, b, leader, topic, group, memberName(leader))}
	waitUntil(t, 60*time.Second, "the leader to create the sticky group", func() bool { return len(liveMembers(ctx, admin, topic, group)) == 1 }, members[0].stderr)
	if leader != nil {
		members = append(members, startStickyMember(t, dir, b, nil, topic, group, memberName(nil)))
	}
	for i := range sdks {
		if &sdks[i] != leader {
			members = append(members, startStickyMember(t, dir, b, &sdks[i], topic, group, memberName(&sdks[i])))
		}
	}
	var names []string
	for _, m := range members {
		names = append(names, m.name)
	}
	sort.Strings(names)
	waitUntil(t, 90*time.Second, "one record of every member, each partition leased by its member", func() bool {
		a := record()
		return a != nil && sameStrings(a.Members, names) && settled(a, 4)
	}, func() string {
		return fmt.Sprintf("record %+v; live %v; stderr: %s", record(), liveMembers(ctx, admin, topic, group), allStderr(members))
	})
	before := record()
	t.Logf("before the expansion: round %d, members %v, owners %v", before.Round, before.Members, before.Owners)
	if before.Members[0] != memberName(leader) {
		t.Fatalf("the record's first member is %s, not the leader %s", before.Members[0], memberName(leader))
	}

	p := startProducer(t, dir, b, nil, topic)
	sent := 0
	phase := func(n int) {
		ls := phaseLines(n, keys)
		p.send(t, ls)
		sent += len(ls)
	}
	delivered := func() int {
		seen := map[string]bool{}
		for _, m := range members {
			for _, l := range m.lines(t) {
				seen[fmt.Sprint(l.Producer, "/", l.PSeq)] = true
			}
		}
		return len(seen)
	}
	allDelivered := func(what string) {
		waitUntil(t, 90*time.Second, what, func() bool { return delivered() >= sent }, func() string {
			return fmt.Sprintf("%d of %d delivered; stderr: %s", delivered(), sent, allStderr(members))
		})
	}
	phase(1)
	allDelivered("epoch 1's records delivered")
	start := time.Now()
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: topic, Partitions: 8}); err != nil {
		t.Fatal(err)
	}
	t.Logf("expand 4 -> 8 in %v", time.Since(start).Round(time.Millisecond))
	phase(2)
	phase(3)
	p.finish(t)
	var after *wire.Assignment
	waitUntil(t, 90*time.Second, "a record of epoch 2 over 8 partitions, each leased by its member", func() bool {
		after = record()
		return after != nil && after.Epoch == 2 && settled(after, 8)
	}, func() string { return fmt.Sprintf("record %+v; stderr: %s", record(), allStderr(members)) })
	allDelivered("every record delivered")
	time.Sleep(500 * time.Millisecond) // duplicates, if any, would show now
	for _, m := range members {
		if !m.alive() {
			t.Errorf("%s member %s exited early: %v; stderr: %s", m.lang, m.name, m.waitErr, m.stderr())
		}
	}
	// A member that leaves (SIGTERM: it commits and deletes its member key) has its partitions
	// spread over the others; nobody else's move (§6.2.1). The leader drops it from the record
	// only once two rebalances in a row miss it.
	if len(members) > 2 {
		leaver := members[len(members)-1]
		leaver.kill(syscall.SIGTERM)
		var rest []string
		for _, n := range names {
			if n != leaver.name {
				rest = append(rest, n)
			}
		}
		var left *wire.Assignment
		waitUntil(t, 60*time.Second, leaver.name+" dropped from the record, every partition leased by its member", func() bool {
			left = record()
			return left != nil && sameStrings(left.Members, rest) && settled(left, 8)
		}, func() string { return fmt.Sprintf("record %+v; stderr: %s", record(), allStderr(members)) })
		for _, q := range after.Partitions {
			if was := after.Owner(q); was != leaver.name && left.Owner(q) != was {
				t.Errorf("partition %d moved from %s to %s when %s left", q, was, left.Owner(q), leaver.name)
			}
		}
		if left.Round != after.Round+1 || left.Moved == nil || *left.Moved <= 0 || *left.Moved >= *left.MovedModulo {
			t.Errorf("the record after %s left: round %d (want %d), moved %v, moved_modulo %v: want only the leaver's keys moved, fewer than modulo moves",
				leaver.name, left.Round, after.Round+1, deref(left.Moved), deref(left.MovedModulo))
		}
		t.Logf("after %s left: round %d, members %v, owners %v, moved %v, moved_modulo %v", leaver.name, left.Round, left.Members, left.Owners, deref(left.Moved), deref(left.MovedModulo))
	}
	for _, m := range members {
		m.kill(syscall.SIGTERM)
	}

	t.Logf("after the expansion: round %d, members %v, owners %v, moved %v, moved_modulo %v", after.Round, after.Members, after.Owners, deref(after.Moved), deref(after.MovedModulo))
	t.Logf("the rounds written: %s", seenRounds())
	if after.Moved == nil || *after.Moved != 0 {
		t.Errorf("the expansion's record says moved %v; linear hashing 4 -> 8 with every member holding the same number of partitions moves nothing (§6.2.1)", deref(after.Moved))
	}
	if after.Round != before.Round+1 || !sameStrings(after.Members, names) {
		t.Errorf("the expansion's record is round %d with members %v; want round %d with %v (no other record between); the rounds written: %s", after.Round, after.Members, before.Round+1, names, seenRounds())
	}
	if h := after.History[len(after.History)-1]; h.Epoch != 2 || h.Moved == nil || *h.Moved != 0 {
		t.Errorf("the history's last summary %+v does not record the expansion with moved 0", h)
	}
	// The record of the expansion gives each child c of 4..7 to its parent c-4's owner.
	for q := 4; q < 8; q++ {
		if after.Owner(q) != before.Owner(q-4) {
			t.Errorf("partition %d went to %s; its parent %d was %s's", q, after.Owner(q), q-4, before.Owner(q-4))
		}
	}
	// Every key was delivered by one member only: none changed member.
	by := map[string]map[string]bool{}
	for _, m := range members {
		n := 0
		for _, l := range m.lines(t) {
			n++
			if k, ok := l.key(); ok {
				if by[string(k)] == nil {
					by[string(k)] = map[string]bool{}
				}
				by[string(k)][m.name] = true
			}
		}
		t.Logf("member %s (%s): %d deliveries", m.name, m.lang, n)
		if n == 0 {
			t.Errorf("member %s (%s) delivered nothing: it did not take part; stderr: %s", m.name, m.lang, m.stderr())
		}
	}
	if len(by) != keys {
		t.Errorf("%d keys delivered, want %d", len(by), keys)
	}
	for k, ms := range by {
		if len(ms) != 1 {
			var who []string
			for m := range ms {
				who = append(who, m)
			}
			sort.Strings(who)
			t.Errorf("key %s delivered by %v: it changed member", k, who)
		}
	}
	var files []string
	for _, m := range members {
		files = append(files, m.cleanCopy(t, dir))
	}
	code, rep, out := pctlVerify(t, []string{p.logPath}, group, files)
	if code != 0 {
		t.Errorf("pctl verify failed (exit %d): %s", code, out)
	}
	for _, g := range rep.Groups {
		t.Logf("pctl verify: group %s: %d acknowledged, %d distinct delivered, %d lost, %d order violations, %d duplicates",
			g.Group, g.Acked, g.Distinct, g.Lost, g.Violations, g.Duplicates)
	}
}

// startStickyMember starts a member like startGroupMember, asking for the sticky assignor.
func startStickyMember(t *testing.T, dir string, b *broker.Broker, s *sdk, topic, group, name string) *memberProc {
	t.Helper()
	creds := b.CredsPath(broker.RoleConsumer)
	var cmd *exec.Cmd
	lang := "go"
	if s == nil {
		cmd = exec.Command(pctlBinary(t), "consume", topic, "--group", group, "--member", name, "--from-beginning", "--format", "jsonl", "--timestamps",
			"--heartbeat", "300ms", "--assignor", "sticky", "--server", b.ClientURL(), "--creds", creds)
	} else {
		lang = s.name
		cmd = exec.Command(filepath.Join(s.dir, "consume"), "--server", b.ClientURL(), "--creds", creds, "--topic", topic, "--group", group,
			"--member", name, "--from-beginning", "--heartbeat", "300ms", "--assignor", "sticky")
		cmd.Dir = s.dir
	}
	m := &memberProc{lang: lang, name: name, cmd: cmd, outPath: filepath.Join(dir, name+".jsonl"), errPath: filepath.Join(dir, name+".err"), exited: make(chan struct{})}
	var err error
	if m.out, err = os.Create(m.outPath); err != nil {
		t.Fatal(err)
	}
	if m.errf, err = os.Create(m.errPath); err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = m.out, m.errf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s member %s: %v", lang, name, err)
	}
	go func() {
		m.waitErr = cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() { m.kill(syscall.SIGKILL) })
	return m
}

func sameStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
