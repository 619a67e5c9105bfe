// Package statuspage is the HTTP side of 'pctl serve --http ADDR': a live status page, Prometheus
// metrics, health checks and the embedded NATS server's monitoring.
//
//	/             the status page (plain HTML, JavaScript and SVG, embedded: no build step)
//	/events       server-sent events: a "status" event with the whole state after every
//	              descriptor change (each step of an epoch change) and every few seconds
//	/api/status   the same state as JSON (broker.Status, plus each topic's graph as SVG)
//	/graph/T.svg  topic T's ancestry graph (internal/graph)
//	/metrics      Prometheus metrics (internal/metrics)
//	/healthz      200 while the process runs and its NATS connection is up
//	/readyz       200 once the broker has started (resumed unfinished work) and JetStream and
//	              its buckets answer
//	/nats/varz, /nats/jsz, /nats/connz, /nats/routez, /nats/subsz, /nats/healthz
//	              nats-server's own monitoring of the embedded server
//
// The server can run before the broker exists (SetBroker), so that /healthz and /readyz answer
// while a broker waits for its cluster. State is read through broker.Status, cached briefly and
// shared by the page, the events and the metrics.
package statuspage

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/graph"
	"pctl.dev/pctl/internal/logging"
	"pctl.dev/pctl/internal/metrics"
)

//go:embed page.html
var page []byte

// Options configures New. Zero values mean defaults.
type Options struct {
	// Metrics, if set, is served at /metrics and reads state from this server's snapshots.
	Metrics *metrics.Metrics
	// Logger receives the server's lines. Default: discard.
	Logger *slog.Logger
	// Every is how often the events stream sends the state when nothing changed. Default 2s.
	Every time.Duration
	// MaxAge is how long a state snapshot is reused. Default 500ms.
	MaxAge time.Duration
}

// Server serves the endpoints above. Safe for concurrent use.
type Server struct {
	opts Options
	b    atomic.Pointer[broker.Broker]
	mux  *http.ServeMux

	mu      sync.Mutex
	cached  *View
	at      time.Time
	changed chan struct{} // closed (and replaced) on every descriptor change
	taking  chan struct{} // non-nil while a snapshot is being taken
	steps   map[string][]StepSeen
}

// View is what /api/status and the events carry: the broker's state, each topic's graph, and
// when this server first saw each step of an epoch change in progress.
type View struct {
	*broker.Status
	Graphs map[string]string     `json:"graphs"` // topic -> SVG
	Steps  map[string][]StepSeen `json:"steps"`  // topic -> the steps of its change in progress
}

// StepSeen is a state of an epoch change and when this server first saw it (the descriptor
// records only the change's start; the broker's log has every step's time).
type StepSeen struct {
	To    int       `json:"to"`
	State string    `json:"state"`
	Seen  time.Time `json:"seen"`
}

// New returns a server without a broker yet.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = logging.Discard()
	}
	if opts.Every <= 0 {
		opts.Every = 2 * time.Second
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = 500 * time.Millisecond
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), changed: make(chan struct{}), steps: map[string][]StepSeen{}}
	if opts.Metrics != nil {
		opts.Metrics.SetSource(func(ctx context.Context) (*broker.Status, error) {
			v, err := s.View(ctx)
			if err != nil {
				return nil, err
			}
			return v.Status, nil
		})
		s.mux.Handle("GET /metrics", opts.Metrics.Handler())
	}
	s.mux.HandleFunc("GET /{$}", s.handlePage)
	s.mux.HandleFunc("GET /api/status", s.handleStatus)
	s.mux.HandleFunc("GET /events", s.handleEvents)
	s.mux.HandleFunc("GET /graph/{file}", s.handleGraph)
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("GET /nats/{what}", s.handleNATS)
	return s
}

// Handler returns the server's handler.
func (s *Server) Handler() http.Handler { return s.mux }

// SetBroker makes b the broker whose state is shown; ctx bounds the watch on its descriptors.
func (s *Server) SetBroker(ctx context.Context, b *broker.Broker) {
	s.b.Store(b)
	if err := b.WatchDescriptors(ctx, func(string) { s.invalidate() }); err != nil {
		s.opts.Logger.Warn("status page: cannot watch descriptor changes; updating every few seconds only", "err", err)
	}
	s.invalidate()
}

func (s *Server) invalidate() {
	s.mu.Lock()
	s.cached = nil
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// errStarting is returned while no broker is set.
var errStarting = errors.New("the broker is starting")

// View returns the current state (a snapshot at most MaxAge old; one snapshot at a time).
func (s *Server) View(ctx context.Context) (*View, error) {
	b := s.b.Load()
	if b == nil {
		return nil, errStarting
	}
	for {
		s.mu.Lock()
		if s.cached != nil && time.Since(s.at) < s.opts.MaxAge {
			v := s.cached
			s.mu.Unlock()
			return v, nil
		}
		if wait := s.taking; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		s.taking = done
		changed := s.changed
		s.mu.Unlock()
		v, err := s.take(ctx, b)
		s.mu.Lock()
		s.taking = nil
		close(done)
		if err == nil {
			select {
			case <-changed: // a change came in while we read: do not cache what may predate it
			default:
				s.cached, s.at = v, time.Now()
			}
		}
		s.mu.Unlock()
		return v, err
	}
}

func (s *Server) take(ctx context.Context, b *broker.Broker) (*View, error) {
	st, err := b.Status(ctx)
	if err != nil {
		return nil, err
	}
	v := &View{Status: st, Graphs: map[string]string{}, Steps: s.noteSteps(st)}
	for i := range st.Topics {
		var buf bytes.Buffer
		if err := graph.SVG(&buf, graph.Build(&st.Topics[i].Topic, graph.Options{})); err == nil {
			v.Graphs[st.Topics[i].Topic.Name] = buf.String()
		}
	}
	return v, nil
}

// noteSteps records the first sighting of each state of each change in progress, and returns
// them (a change that is over is forgotten).
func (s *Server) noteSteps(st *broker.Status) map[string][]StepSeen {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]StepSeen{}
	now := time.Now().UTC()
	for _, ts := range st.Topics {
		ch, name := ts.Topic.Change, ts.Topic.Name
		if ch == nil {
			delete(s.steps, name)
			continue
		}
		seen := s.steps[name]
		if len(seen) > 0 && seen[0].To != ch.To {
			seen = nil
		}
		if len(seen) == 0 || seen[len(seen)-1].State != ch.State {
			seen = append(seen, StepSeen{To: ch.To, State: ch.State, Seen: now})
		}
		s.steps[name] = seen
		out[name] = append([]StepSeen(nil), seen...)
	}
	for name := range s.steps {
		if _, ok := out[name]; !ok {
			delete(s.steps, name)
		}
	}
	return out
}

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(page)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	v, err := s.View(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) handleGraph(w http.ResponseWriter, r *http.Request) {
	topic, ok := strings.CutSuffix(r.PathValue("file"), ".svg")
	if !ok || wire.ValidTopic(topic) != nil {
		http.Error(w, "give /graph/TOPIC.svg", http.StatusNotFound)
		return
	}
	v, err := s.View(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	svg, ok := v.Graphs[topic]
	if !ok {
		http.Error(w, fmt.Sprintf("no topic %s", topic), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml")
	_, _ = w.Write([]byte(svg))
}

// handleEvents streams the state as server-sent events.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming not supported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	tick := time.NewTicker(s.opts.Every)
	defer tick.Stop()
	ctx := r.Context()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if v, err := s.View(ctx); err == nil {
			body, _ := json.Marshal(v)
			if _, err := fmt.Fprintf(w, "event: status\ndata: %s\n\n", body); err != nil {
				return
			}
		} else if ctx.Err() == nil {
			msg, _ := json.Marshal(err.Error())
			if _, err := fmt.Fprintf(w, "event: unavailable\ndata: %s\n\n", msg); err != nil {
				return
			}
		}
		fl.Flush()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	b := s.b.Load()
	switch {
	case b == nil:
		http.Error(w, "starting: not connected to NATS yet", http.StatusServiceUnavailable)
	case b.Healthy() != nil:
		http.Error(w, b.Healthy().Error(), http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	b := s.b.Load()
	if b == nil {
		http.Error(w, "not ready: the broker is starting (connecting, creating its buckets, resuming unfinished work)", http.StatusServiceUnavailable)
		return
	}
	if err := b.Ready(r.Context()); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

func (s *Server) handleNATS(w http.ResponseWriter, r *http.Request) {
	b := s.b.Load()
	if b == nil {
		http.Error(w, errStarting.Error(), http.StatusServiceUnavailable)
		return
	}
	hs := b.NATSMonitor()
	if hs == nil {
		http.Error(w, "this broker uses an external NATS server (--nats): use its own monitoring port (8222 in the configuration 'pctl nats-server config' writes)", http.StatusNotFound)
		return
	}
	h, ok := hs[r.PathValue("what")]
	if !ok {
		http.Error(w, "give /nats/varz, jsz, connz, routez, subsz or healthz", http.StatusNotFound)
		return
	}
	h(w, r)
}
