package statuspage

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/metrics"
	"pctl.dev/pctl/internal/testhook"
)

// chromium finds Debian's chromium, or skips (fails with PCTL_REQUIRE_TOOLCHAINS=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" {
		t.Fatal("chromium not found; scripts/install-toolchains.sh installs it (apt-get install chromium)")
	}
	t.Skip("chromium not found (apt-get install chromium; PCTL_REQUIRE_TOOLCHAINS=1 makes this a failure)")
	return ""
}

// screenshotDir is where the browser tests keep their screenshots: $PCTL_SCREENSHOTS, else a
// temporary directory of the test.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("PCTL_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// pausedBroker is a broker whose epoch changes stop after the "created" step until released.
type pausedBroker struct {
	*broker.Broker
	mu      sync.Mutex
	arm     bool
	reached chan struct{}
	release chan struct{}
}

func startPaused(t *testing.T) *pausedBroker {
	t.Helper()
	pb := &pausedBroker{reached: make(chan struct{}), release: make(chan struct{})}
	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		Testing: testhook.Steps(func(topic, state string) error {
			pb.mu.Lock()
			hold := pb.arm && state == "created"
			if hold {
				pb.arm = false
			}
			pb.mu.Unlock()
			if hold {
				close(pb.reached)
				<-pb.release
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	pb.Broker = b
	return pb
}

// TestStatusPageInBrowser loads the status page in a real headless chromium while an epoch
// change is held at its "created" step, checks that the page shows that step, then releases the
// change and checks, on the same page (no reload: server-sent events), the new epoch and its
// ancestry graph with the observed key counts, which must add up to the distinct keys produced.
func TestStatusPageInBrowser(t *testing.T) {
	exe := chromium(t)
	shots := screenshotDir(t)
	pb := startPaused(t)
	m := metrics.New(metrics.Options{})
	srv := New(Options{Metrics: m, Every: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv.SetBroker(ctx, pb.Broker)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	admin, err := client.Connect(ctx, client.Options{URL: pb.ClientURL(), Creds: pb.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "orders", Partitions: 3, Partitioner: "librdkafka-consistent"}); err != nil {
		t.Fatal(err)
	}
	const keys = 300
	p, err := admin.NewProducer(ctx, "orders", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3*keys; i++ { // every key three times: key counts are distinct keys, not records
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("user-%d", i%keys)), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cons, err := admin.NewConsumer(ctx, "orders", client.ConsumerOptions{Group: "billing", FromBeginning: true})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stopCons := context.WithCancel(ctx)
	consDone := make(chan error, 1)
	go func() { consDone <- cons.Run(cctx, func(context.Context, *client.Message) error { return nil }) }()
	defer func() { stopCons(); <-consDone }()

	pb.mu.Lock()
	pb.arm = true
	pb.mu.Unlock()
	changeDone := make(chan error, 1)
	go func() {
		// A new function and count: the ancestry is observed over the stored keys.
		_, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "orders", Partitions: 5, Partitioner: "kafka-murmur2"})
		changeDone <- err
	}()
	select {
	case <-pb.reached:
	case err := <-changeDone:
		t.Fatalf("repartition ended before its created step was held: %v", err)
	case <-ctx.Done():
		t.Fatal("the change never reached its created step")
	}
	released := false
	defer func() {
		if !released {
			close(pb.release)
		}
	}()

	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1300, 1000))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	shot := func(name string) {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			return
		}
		path := filepath.Join(shots, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot %s", path)
	}
	text := func(sel string) string {
		t.Helper()
		return pageText(t, bctx, sel)
	}
	attr := func(sel, name string) string {
		t.Helper()
		return pageAttr(t, bctx, sel, name)
	}
	eval := func(js string) int {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	wait := func(what, sel string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			shot("failed.png")
			t.Fatalf("%s: %s never showed: %v", what, sel, err)
		}
	}
	const art = `article[data-topic="orders"]`

	// 1. The change, held at "created".
	if err := chromedp.Do(bctx, chromedp.Navigate(hs.URL+"/")); err != nil {
		t.Fatal(err)
	}
	wait("the change held at created", art+` .change[data-state="created"]`)
	if current, state := attr(art+` .change li.current`, "data-step"), text(art+` .change .change-state`); current != "created" || state != "state created" {
		t.Fatalf("page shows step %q (%q) during a change held at created", current, state)
	}
	if seen := text(art + ` .change li.current`); !strings.HasPrefix(seen, "created +") || !strings.HasSuffix(seen, " s") {
		t.Fatalf("the current step %q does not say when it was reached", seen)
	}
	if n := eval(`document.querySelectorAll('` + art + ` svg.ancestry g.epoch.planned[data-epoch="2"][data-state="created"]').length`); n != 1 {
		t.Fatalf("the graph does not draw the planned epoch 2 (found %d)", n)
	}
	updatesBefore := attr("body", "data-updates")
	shot("status-change-created.png")

	// 2. Release: the same page shows epoch 2, then its observed ancestry.
	close(pb.release)
	released = true
	if err := <-changeDone; err != nil {
		t.Fatalf("repartition: %v", err)
	}
	wait("epoch 2 active", art+`[data-epoch="2"][data-changing="false"]`)
	if epoch := text(art + ` .epoch-current`); epoch != "2" {
		t.Fatalf("page shows epoch %q, want 2", epoch)
	}
	wait("the observed ancestry", art+` svg.ancestry g.epoch.current[data-epoch="2"][data-source="observed"]`)
	keySum := eval(`[...document.querySelectorAll('` + art + ` svg.ancestry path.edge[data-keys]')].reduce((a, p) => a + Number(p.dataset.keys), 0)`)
	if keySum != keys {
		t.Fatalf("the graph's edges carry %d keys; %d distinct keys were produced", keySum, keys)
	}
	if a, b := mustAtoi(attr("body", "data-updates")), mustAtoi(updatesBefore); a <= b {
		t.Fatalf("the page did not update itself (updates %d then %d)", b, a)
	}
	// The consumer group is listed with its member.
	wait("the consumer group", art+` tr.group[data-group="billing"]`)
	if g := text(art + ` tr.group[data-group="billing"]`); !strings.Contains(g, cons.Member()) {
		t.Fatalf("group row %q does not name the live member %s", g, cons.Member())
	}
	shot("status-epoch-2.png")
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
