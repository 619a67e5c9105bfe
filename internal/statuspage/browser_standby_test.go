package statuspage

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// TestStatusPageShowsStandbys loads the status page in headless chromium while a sticky group has
// member a and three standbys warming up before they join (spec/protocol.md §6.10): c and d warm
// (reporting lags 1234 and 5678), e is queued (at most two warm at once). The page lists each
// under the group's members, warming with its lag or queued. On the old code it showed none.
func TestStatusPageShowsStandbys(t *testing.T) {
	exe := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	srv := New(Options{Every: 300 * time.Millisecond})
	srv.SetBroker(ctx, b)
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	admin, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, wire.CreateTopicRequest{Topic: "t", Partitions: 4, Partitioner: "linear-murmur2"}); err != nil {
		t.Fatal(err)
	}
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	run := func(member string, lag int64) {
		var wu *client.WarmUp
		if lag > 0 {
			wu = &client.WarmUp{MaxLag: 10, Warm: func(context.Context, []int) (int64, error) { return lag, nil }}
		}
		cn, err := admin.NewConsumer(ctx, "t", client.ConsumerOptions{Group: "g", Member: member, Assignor: wire.AssignorSticky,
			Heartbeat: 100 * time.Millisecond, SessionTimeout: 3 * time.Second, WarmUp: wu, Logf: func(string, ...any) {}})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- cn.Run(rctx, func(context.Context, *client.Message) error { return nil }) }()
		stops = append(stops, func() {
			stop()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("member %s: %v", member, err)
			}
		})
	}
	run("a", 0)
	time.Sleep(500 * time.Millisecond) // a is the group's live member before the standbys come
	run("c", 1234)
	time.Sleep(50 * time.Millisecond) // a queue order: c, d, e
	run("d", 5678)
	time.Sleep(50 * time.Millisecond)
	run("e", 99)

	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1300, 1000))
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(hs.URL+"/")); err != nil {
		t.Fatal(err)
	}
	const group = `article[data-topic="t"] tr.group[data-group="g"]`
	for _, s := range []struct{ member, state, text string }{
		{"c", "warming", "c (standby: warming up, lag 1234)"},
		{"d", "warming", "d (standby: warming up, lag 5678)"},
		{"e", "queued", "e (standby: queued for a warm-up slot)"},
	} {
		sel := group + ` .standby[data-member="` + s.member + `"][data-state="` + s.state + `"]`
		wctx, wcancel := context.WithTimeout(bctx, 30*time.Second)
		err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(sel)))
		wcancel()
		if err != nil {
			t.Fatalf("standby %s never showed %s: %v", s.member, s.state, err)
		}
		v := pageText(t, bctx, sel)
		if got := strings.Join(strings.Fields(v), " "); got != s.text {
			t.Errorf("standby %s: %q, want %q", s.member, got, s.text)
		}
	}
}
