// Package interrupt lets a command stop while it waits for input. A command that catches SIGINT
// and SIGTERM (to stop cleanly) loses the default "kill the process", so a read from a pipe that
// has nothing to give would block it for ever; Reader returns at once with the context's error
// instead.
package interrupt

import (
	"context"
	"io"
)

// Reader returns a reader of r whose Read returns ctx's error as soon as ctx is done, even while
// r blocks. The data is read by a goroutine in chunks of up to 256 KiB, so the cost per Read is
// one channel hand-off; that goroutine ends with r (or stays blocked in r's Read after an
// interrupt, which is harmless: the command is exiting).
func Reader(ctx context.Context, r io.Reader) io.Reader {
	cr := &reader{ctx: ctx, data: make(chan chunk), free: make(chan []byte, 2)}
	cr.free <- make([]byte, 256<<10)
	cr.free <- make([]byte, 256<<10)
	go cr.pump(r)
	return cr
}

type chunk struct {
	b   []byte
	err error
}

type reader struct {
	ctx  context.Context
	data chan chunk
	free chan []byte
	cur  []byte // unread part of the chunk in hand
	buf  []byte // the chunk in hand, to give back
	err  error
}

func (c *reader) pump(r io.Reader) {
	for {
		var buf []byte
		select {
		case buf = <-c.free:
		case <-c.ctx.Done():
			return
		}
		n, err := r.Read(buf)
		select {
		case c.data <- chunk{b: buf[:n], err: err}:
		case <-c.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (c *reader) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.buf != nil {
			c.free <- c.buf[:cap(c.buf)]
			c.buf = nil
		}
		select {
		case <-c.ctx.Done():
			return 0, c.ctx.Err()
		case ch := <-c.data:
			c.cur, c.buf, c.err = ch.b, ch.b, ch.err
		}
	}
	if c.ctx.Err() != nil {
		return 0, c.ctx.Err()
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}
