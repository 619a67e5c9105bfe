package clientconf

import "syscall"

// procAttr puts a command in its own process group (signals go to the whole group) and, on
// Linux, kills it when the harness dies, so no client outlives an interrupted run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
