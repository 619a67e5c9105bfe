//go:build !linux

package natscluster

import "os/exec"

func setDeathSignal(*exec.Cmd) {}

func waitStopped(int, bool) {}
