package metrics

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/produce"
	"pctl.dev/pctl/runtime"
)

// TestEpochRecords: records per epoch and partition, worked out by hand from the protocol's
// layout (records, then the fence marker at boundary+1, then the next epoch's records).
func TestEpochRecords(t *testing.T) {
	tp := &wire.Topic{Name: "t", Epochs: []wire.Epoch{
		{Epoch: 1, Partitions: 2, Boundaries: []uint64{5, 0}},    // stream 0: 1-5, marker 6; stream 1: empty, marker 1
		{Epoch: 2, Partitions: 3, Boundaries: []uint64{8, 3, 4}}, // 7-8 m9; 2-3 m4; stream 2 new: 1-4 m5
		{Epoch: 3, Partitions: 1},                                // 10-12; streams 1 and 2 retired
	}}
	got := EpochRecords(tp, []uint64{12, 4, 5})
	want := [][]uint64{{5, 0}, {2, 2, 4}, {3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("EpochRecords = %v, want %v", got, want)
	}
}

func hostile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "runtime", "testdata", "hostile", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPluginFailureClasses: real failures of hostile modules are counted under their class.
func TestPluginFailureClasses(t *testing.T) {
	ctx := context.Background()
	rt, err := runtime.New(ctx, runtime.Config{Fuel: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	m := New(Options{})
	for _, tc := range []struct{ module, class string }{
		{"loop-forever.wasm", "time_limit"},
		{"out-of-range.wasm", "out_of_range"},
		{"recurse.wasm", "call_depth"},
	} {
		mod, err := rt.Load(ctx, hostile(t, tc.module))
		if err != nil {
			t.Fatalf("%s: %v", tc.module, err)
		}
		pool, err := mod.NewPool(ctx, nil, runtime.PoolOptions{Size: 1})
		if err != nil {
			t.Fatalf("%s: %v", tc.module, err)
		}
		_, err = pool.Partition([]byte("k"), 8)
		pool.Close()
		if err == nil {
			t.Fatalf("%s: no error", tc.module)
		}
		if c := FailureClass(err); c != tc.class {
			t.Fatalf("%s: class %q of %v, want %q", tc.module, c, err, tc.class)
		}
		m.OnPluginCall(tc.module, 1, time.Millisecond, -1, err)
		if v := testutil.ToFloat64(m.pluginFailures.WithLabelValues(tc.module, tc.class)); v != 1 {
			t.Fatalf("%s: failures{class=%s} = %v", tc.module, tc.class, v)
		}
	}
	if c := FailureClass(errors.New("something else")); c != "other" {
		t.Fatalf("class of an unknown error: %q", c)
	}
}

// TestProduceHookCardinality: without per-partition metrics, records of 64 partitions are one
// series per (topic, epoch, result); with them, one per partition as well.
func TestProduceHookCardinality(t *testing.T) {
	for _, per := range []bool{false, true} {
		m := New(Options{PerPartition: per})
		rec := &produce.Record{Key: []byte("k"), Value: []byte("value")}
		for q := 0; q < 64; q++ {
			m.OnProduceRecord("t", rec, produce.Result{Epoch: 1, Partition: q}, time.Millisecond)
		}
		m.OnProduceRecord("t", rec, produce.Result{Epoch: 1, Err: errors.New("refused")}, time.Millisecond)
		if v := testutil.ToFloat64(m.produceRecords.WithLabelValues("t", "1", "acked")); v != 64 {
			t.Fatalf("acked = %v, want 64", v)
		}
		if v := testutil.ToFloat64(m.produceBytes.WithLabelValues("t", "1")); v != 64*6 {
			t.Fatalf("bytes = %v, want %d", v, 64*6)
		}
		n := testutil.CollectAndCount(m.producePartRec)
		if want := map[bool]int{false: 0, true: 64}[per]; n != want {
			t.Fatalf("per-partition %v: %d partition series, want %d", per, n, want)
		}
	}
}

// TestLeaseChanges: owner changes between snapshots are counted, a steady owner is not.
func TestLeaseChanges(t *testing.T) {
	m := New(Options{})
	g := func(owners ...string) broker.GroupStatus {
		gs := broker.GroupStatus{Group: "g"}
		for q, o := range owners {
			gs.Partitions = append(gs.Partitions, broker.GroupPartition{Partition: q, Owner: o})
		}
		return gs
	}
	for i, tc := range []struct {
		owners []string
		want   float64
	}{
		{[]string{"a", "a"}, 0},
		{[]string{"a", "a"}, 0},
		{[]string{"b", "a"}, 1}, // taken over
		{[]string{"b", ""}, 2},  // released
		{[]string{"b", "c"}, 3}, // acquired
	} {
		if got := m.leaseChanges("id", "t", g(tc.owners...)); got != tc.want {
			t.Fatalf("snapshot %d: %v lease changes, want %v", i, got, tc.want)
		}
	}
}

// TestBackfillGauges: a backfill's recorded progress, then its end, as pctl_backfill gauges.
func TestBackfillGauges(t *testing.T) {
	m := New(Options{})
	m.OnBackfill("kv", 3, 120, 7, 1, 4, false)
	for what, want := range map[string]float64{"epoch": 3, "copied": 120, "refused": 7, "partitions_done": 1, "partitions": 4, "running": 1} {
		if v := testutil.ToFloat64(m.backfill.WithLabelValues("kv", what)); v != want {
			t.Errorf("running: pctl_backfill{what=%q} = %v, want %v", what, v, want)
		}
	}
	m.OnBackfill("kv", 3, 400, 9, 4, 4, true)
	for what, want := range map[string]float64{"copied": 400, "partitions_done": 4, "running": 0} {
		if v := testutil.ToFloat64(m.backfill.WithLabelValues("kv", what)); v != want {
			t.Errorf("ended: pctl_backfill{what=%q} = %v, want %v", what, v, want)
		}
	}
}
