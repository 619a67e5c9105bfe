package netproxy

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, line string, timeout time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	s, err := r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func TestForwardCutFreezeRefuse(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c, r := dial(t, p)
	if got, err := roundTrip(c, r, "hello", 5*time.Second); err != nil || got != "hello" {
		t.Fatalf("through the proxy: %q, %v; want the echo", got, err)
	}

	// Freeze: the line is held, not lost, and arrives after Thaw.
	p.Freeze()
	if _, err := roundTrip(c, r, "held", 200*time.Millisecond); err == nil {
		t.Fatal("a frozen proxy forwarded a line")
	}
	p.Thaw()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if s, err := r.ReadString('\n'); err != nil || s != "held\n" {
		t.Fatalf("after thaw: %q, %v; want the held line", s, err)
	}

	// Cut: the open connection fails; a new one works.
	if n := p.Cut(); n != 1 {
		t.Fatalf("cut %d connections, want 1", n)
	}
	if _, err := roundTrip(c, r, "after cut", 5*time.Second); err == nil {
		t.Fatal("a cut connection still works")
	}
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "again", 5*time.Second); err != nil || got != "again" {
		t.Fatalf("new connection after a cut: %q, %v", got, err)
	}

	// Refuse: new connections are closed at once; open ones keep working.
	p.Refuse(true)
	// The reset may already fail the dial, or only the first read.
	if c3, err := net.Dial("tcp", p.Addr()); err == nil {
		if _, err := roundTrip(c3, bufio.NewReader(c3), "refused", 5*time.Second); err == nil {
			t.Fatal("a refused connection was forwarded")
		}
		c3.Close()
	}
	if got, err := roundTrip(c2, r2, "still", 5*time.Second); err != nil || got != "still" {
		t.Fatalf("an open connection stopped while refusing new ones: %q, %v", got, err)
	}
	p.Refuse(false)
	c4, r4 := dial(t, p)
	if got, err := roundTrip(c4, r4, "back", 5*time.Second); err != nil || got != "back" {
		t.Fatalf("after refuse off: %q, %v", got, err)
	}
	if p.Accepted() != 3 {
		t.Errorf("accepted %d, want 3 (the refused one does not count)", p.Accepted())
	}
}

func TestCutWhileFrozenAndClose(t *testing.T) {
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "x", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Freeze()
	if n := p.Cut(); n != 1 {
		t.Fatalf("cut %d, want 1", n)
	}
	if _, err := roundTrip(c, r, "y", 2*time.Second); err == nil {
		t.Fatal("cut while frozen: connection still works")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("a closed proxy still accepts")
	}
}
