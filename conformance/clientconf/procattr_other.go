//go:build !linux

package clientconf

import "syscall"

// procAttr puts a command in its own process group (signals go to the whole group).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
