package statuspage

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/internal/testhook"
)

// TestStatusPageShowsBackfill loads the status page in headless chromium while a compacted
// topic's backfill is held at its start (the broker's step hook), checks that the page shows it
// running with nothing handled of the 60 stored messages in 2 old partitions, then releases it
// and checks, on the same page (server-sent events), that it shows it done: 2 of 2 partitions,
// 60 of 60 messages, 60 copies (one per key), a rate in keys/s, and the per-partition table.
func TestStatusPageShowsBackfill(t *testing.T) {
	exe := chromium(t)
	shots := screenshotDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000,
		Testing: testhook.Steps(func(topic, state string) error {
			if state == "backfill-start" {
				first := false
				once.Do(func() { first = true })
				if first {
					close(held)
					select {
					case <-release:
					case <-ctx.Done():
					}
				}
			}
			return nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	srv := New(Options{Every: 300 * time.Millisecond})
	srv.SetBroker(ctx, b)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	admin, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "kv", Partitions: 2, Partitioner: "jump", Compact: true}); err != nil {
		t.Fatal(err)
	}
	const keys = 60
	p, err := admin.NewProducer(ctx, "kv", client.ProducerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < keys; i++ {
		if err := p.Send(ctx, client.Record{Key: []byte(fmt.Sprintf("user-%d", i)), Value: []byte("v")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Repartition(ctx, wire.RepartitionRequest{Topic: "kv", Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the backfill did not start")
	}

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
	wait := func(what, sel string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(bctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			shot("backfill-failed.png")
			t.Fatalf("%s: %s never showed: %v", what, sel, err)
		}
	}
	const bf = `article[data-topic="kv"] .backfill[data-epoch="2"]`

	if err := chromedp.Do(bctx, chromedp.Navigate(hs.URL+"/")); err != nil {
		t.Fatal(err)
	}
	wait("the held backfill", bf+`[data-state="running"]`)
	if got := text(bf + ` .backfill-parts`); got != "0 of 2 old partitions done" {
		t.Errorf("held backfill: %q, want 0 of 2 old partitions done", got)
	}
	if got, want := text(bf+` .backfill-handled`), fmt.Sprintf("0 of %d messages", keys); got != want {
		t.Errorf("held backfill: %q, want %q", got, want)
	}
	shot("status-backfill-running.png")

	close(release)
	released = true
	wait("the ended backfill", bf+`[data-state="done"]`)
	for sel, want := range map[string]string{
		bf + ` .backfill-parts`:   "2 of 2 old partitions done",
		bf + ` .backfill-handled`: fmt.Sprintf("%d of %d messages", keys, keys),
		bf + ` .backfill-copied`:  fmt.Sprintf("%d copies", keys),
	} {
		if got := text(sel); got != want {
			t.Errorf("ended backfill: %s shows %q, want %q", sel, got, want)
		}
	}
	if got := text(bf + ` .backfill-rate`); !strings.HasSuffix(got, " keys/s") || strings.HasPrefix(got, "0 ") {
		t.Errorf("ended backfill: rate %q, want a positive number of keys/s", got)
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('`+bf+` tr[data-partition]').length`)); err != nil || n != 2 {
		t.Errorf("the per-partition table has %d rows (%v), want 2", n, err)
	}
	shot("status-backfill-done.png")
}
