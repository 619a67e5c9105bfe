package interrupt

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestReadsEverything(t *testing.T) {
	src := strings.Repeat("0123456789", 100000) // four chunks
	got, err := io.ReadAll(Reader(context.Background(), strings.NewReader(src)))
	if err != nil || string(got) != src {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
}

// TestInterruptWhileBlocked: a reader blocked on a pipe with nothing to read returns the
// context's error once the context is cancelled.
func TestInterruptWhileBlocked(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	r := Reader(ctx, pr)
	go func() { pw.Write([]byte("abc")) }()
	buf := make([]byte, 10)
	if n, err := r.Read(buf); err != nil || !bytes.Equal(buf[:n], []byte("abc")) {
		t.Fatalf("first read: %q %v", buf[:n], err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Read(buf); done <- err }()
	time.Sleep(20 * time.Millisecond) // the read is blocked: nothing more comes
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("read after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not return after the context was cancelled")
	}
}
