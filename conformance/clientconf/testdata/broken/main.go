// Command broken wraps a sound client command and breaks what it prints, so that the tests of
// conformance/clientconf can show that each check of the harness fails a client that breaks its
// rule:
//
//	broken MODE CMD [ARGS...]
//
// runs CMD ARGS (the harness's flags come last, as for any client) and copies its standard output,
// one JSON line at a time, changed by MODE:
//
//	drop       every 20th delivery is not printed (the record was acknowledged: lost)
//	reorder    every 6th keyed delivery is stamped 10s early, as if delivered before the
//	           records of its key sent before it (per-key order broken)
//	misplace   a keyed delivery claims partition+1 of its epoch (placement broken)
//	duplicate  every 10th delivery is printed twice (a duplicate without a crash)
//	no-result  the producer's result of every 7th record is not printed
//	early-seq  the producer's results claim sequence numbers that decrease in line order (each
//	           record stored before the records of its key sent before it)
//
// SIGTERM and SIGINT are passed on to CMD; the exit status is CMD's.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: broken MODE CMD [ARGS...]")
		os.Exit(2)
	}
	mode := os.Args[1]
	cmd := exec.Command(os.Args[2], os.Args[3:]...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with this wrapper (the tests run on Linux)
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "broken:", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "broken:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	w := bufio.NewWriter(os.Stdout)
	emit := func(b []byte) {
		w.Write(append(bytes.TrimRight(b, "\n"), '\n'))
		w.Flush()
	}
	n := 0
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := append([]byte(nil), sc.Bytes()...)
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if dec.Decode(&m) != nil {
			emit(line)
			continue
		}
		n++
		_, keyed := m["key"]
		switch mode {
		case "drop":
			if n%20 == 0 {
				continue
			}
		case "duplicate":
			if n%10 == 0 {
				emit(line)
			}
		case "misplace":
			if p, ok := m["partition"].(json.Number); ok && keyed {
				v, _ := p.Int64()
				m["partition"] = v + 1
				line, _ = json.Marshal(m)
			}
		case "reorder":
			// Every 6th keyed delivery claims to come 10s earlier: before the records of its key
			// that were sent, and delivered, before it.
			if ts, ok := m["ts"].(json.Number); ok && keyed && n%6 == 0 {
				v, _ := ts.Int64()
				m["ts"] = v - 10e9
				line, _ = json.Marshal(m)
			}
		case "early-seq":
			if p, ok := m["pseq"].(json.Number); ok && m["acked"] == true {
				v, _ := p.Int64()
				m["seq"] = 1_000_000 - v
				line, _ = json.Marshal(m)
			}
		case "no-result":
			if n%7 == 0 {
				continue
			}
		}
		emit(line)
	}
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		os.Exit(1)
	}
}
