//go:build !unix

package dirlock

import (
	"errors"
	"os"
)

// Without flock(2) the lock is advisory only: Acquire always succeeds.
var errWouldBlock = errors.New("would block")

func flock(*os.File) error { return nil }

func unflock(*os.File) {}
