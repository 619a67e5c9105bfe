// Package netproxy is a loopback TCP proxy for fault-injection tests. A Proxy listens on
// 127.0.0.1, forwards every accepted connection to one target address, and can, at a moment
// the test chooses:
//
//   - Cut every open connection (both directions closed at once, with a TCP reset), as when a
//     process dies or a network path fails; new connections are accepted again right after;
//   - Freeze every connection (bytes stop flowing in both directions but nothing is closed,
//     as with a paused process or a black-holed link) and Thaw it later: what was held is then
//     delivered, in order;
//   - Refuse new connections (accept and close at once) for as long as the test says.
//
// Point a client at Addr instead of the server, or put one proxy on each route between two
// cluster nodes (a proxy is one-target: use one per destination). A Proxy is safe for
// concurrent use; Close stops it and closes every connection.
package netproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections from its listening address to a target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	conns   map[*pair]struct{}
	frozen  bool
	refuse  bool
	closed  bool
	cuts    int
	accepts int
	wg      sync.WaitGroup
}

type pair struct {
	client, server net.Conn
	once           sync.Once
}

// New starts a proxy on 127.0.0.1 (a free port) that forwards to target ("host:port").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: map[*pair]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Conns is the number of connections open through the proxy now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is the number of connections the proxy has forwarded since it started.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// Cut closes every open connection at once, both sides, with a TCP reset (bytes in flight
// are lost). It returns how many connections it cut. New connections are accepted again (unless
// Refuse is set), so a reconnecting client gets through.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	var cut []*pair
	for c := range p.conns {
		cut = append(cut, c)
		delete(p.conns, c)
	}
	p.cuts += len(cut)
	p.cond.Broadcast() // frozen copiers wake up and find their connection gone
	p.mu.Unlock()
	for _, c := range cut {
		c.close(true)
	}
	return len(cut)
}

// Freeze stops forwarding on every connection, open or new: nothing is read or written until
// Thaw, and nothing is closed (the peers see silence, then their own timeouts).
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Thaw resumes forwarding after Freeze; bytes held meanwhile are delivered in order.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Refuse makes the proxy close new connections as soon as it accepts them (on), or forward
// them again (off). Open connections are not affected: Cut them too for a full outage.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Close stops the proxy: the listener and every connection are closed. Idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			resetClose(c)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			resetClose(c)
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pr.close(true)
			continue
		}
		p.conns[pr] = struct{}{}
		p.accepts++
		p.mu.Unlock()
		p.wg.Add(2)
		go p.copy(pr, s, c)
		go p.copy(pr, c, s)
	}
}

// copy forwards src to dst until either side fails or the pair is cut, holding still while the
// proxy is frozen.
func (p *Proxy) copy(pr *pair, dst, src net.Conn) {
	defer p.wg.Done()
	defer p.drop(pr)
	buf := make([]byte, 32*1024)
	for {
		if !p.gate(pr) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(pr) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // end of stream or failure: the pair closes (deferred drop)
		}
	}
}

// gate waits while the proxy is frozen; it reports false once the pair was cut.
func (p *Proxy) gate(pr *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if _, ok := p.conns[pr]; !ok {
			return false
		}
		if !p.frozen {
			return true
		}
		p.cond.Wait()
	}
}

func (p *Proxy) drop(pr *pair) {
	p.mu.Lock()
	_, open := p.conns[pr]
	delete(p.conns, pr)
	p.mu.Unlock()
	if open {
		pr.close(false)
	}
}

func (pr *pair) close(reset bool) {
	pr.once.Do(func() {
		if reset {
			resetClose(pr.client)
			resetClose(pr.server)
			return
		}
		pr.client.Close()
		pr.server.Close()
	})
}

// resetClose closes a connection with a TCP reset instead of an orderly FIN, so the peer sees
// an abrupt failure (what a dead process or a failed link looks like).
func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
