package statuspage

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBeforeAndAfterTheBroker: while the broker starts, health and readiness answer 503 with
// the reason and the events say "unavailable"; once it is set, both are 200 and the events carry
// the state.
func TestBeforeAndAfterTheBroker(t *testing.T) {
	s := New(Options{Every: 100 * time.Millisecond})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	for path, want := range map[string]string{"/healthz": "starting", "/readyz": "not ready: the broker is starting", "/api/status": "starting", "/nats/varz": "starting"} {
		if code, body := get(t, hs.URL+path); code != 503 || !strings.Contains(body, want) {
			t.Fatalf("%s before the broker: %d %q", path, code, body)
		}
	}
	events := func(want string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("events content type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			if sc.Text() == "event: "+want {
				return
			}
		}
		t.Fatalf("no %q event: %v", want, sc.Err())
	}
	events("unavailable")

	b, err := broker.Start(context.Background(), broker.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", ConformanceKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.SetBroker(ctx, b)
	for _, path := range []string{"/healthz", "/readyz", "/api/status", "/nats/jsz", "/"} {
		if code, body := get(t, hs.URL+path); code != 200 {
			t.Fatalf("%s: %d %q", path, code, body)
		}
	}
	events("status")
	if code, _ := get(t, hs.URL+"/graph/nope.svg"); code != 404 {
		t.Fatalf("graph of a missing topic: %d", code)
	}
	if code, _ := get(t, hs.URL+"/nats/stacksz"); code != 404 {
		t.Fatalf("/nats/stacksz (not exposed): %d", code)
	}
}
