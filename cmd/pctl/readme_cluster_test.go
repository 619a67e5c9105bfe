package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/internal/natscluster"
)

// TestReadmeClusterSection runs the README's "Run on a NATS cluster" commands as written, with the
// pctl binary as ./pctl in a fresh directory. The only change is the ports: the test picks free
// ones (the machine may run other servers on 4222..) and adds --port, --cluster-port and
// --http-port to 'pctl nats-server config', replacing 4222..4224 in the later lines. A line
// ending in & runs in the background, and the next line waits until it is up (a node's client
// port accepts, 'pctl serve' printed its ready line), as a person typing the commands would.
//
// What it checks, apart from every command exiting 0: the consumer printed the three records, and
// the partition streams have 3 replicas, asked of the cluster itself ($JS.API.STREAM.INFO).
func TestReadmeClusterSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster of processes")
	}
	bin, err := natscluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	lines := readmeBlock(t, "### Run on a NATS cluster")
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "pctl")); err != nil {
		t.Fatal(err)
	}
	// Without --hosts the nodes count up from the base ports: pick consecutive ones.
	base := consecutivePorts(t)
	portFlags := fmt.Sprintf(" --port %d --cluster-port %d --http-port %d", base, base+3, base+6)
	clientPort := map[string]string{"4222": fmt.Sprint(base), "4223": fmt.Sprint(base + 1), "4224": fmt.Sprint(base + 2)}

	envs := os.Environ()
	envs = append(envs, "PCTL_SERVER=", "PCTL_CREDS=", "XDG_DATA_HOME="+filepath.Join(dir, "xdg"), "HOME="+dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type bgProc struct {
		cmd    *exec.Cmd
		exited chan struct{}
	}
	var bg []bgProc
	defer func() {
		for _, p := range bg {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range bg {
			select {
			case <-p.exited:
			case <-time.After(15 * time.Second):
				p.cmd.Process.Kill()
				<-p.exited
			}
		}
	}()
	var consumed string
	for _, line := range lines {
		if strings.Contains(line, "nats-server config") {
			line += portFlags
		}
		for from, to := range clientPort {
			line = strings.ReplaceAll(line, "127.0.0.1:"+from, "127.0.0.1:"+to)
		}
		if rest, ok := strings.CutPrefix(line, "export "); ok {
			for _, kv := range strings.Fields(rest) {
				envs = append(envs, kv)
			}
			continue
		}
		if cmdline, ok := strings.CutSuffix(line, "&"); ok {
			c := exec.Command("bash", "-c", "exec "+cmdline)
			c.Dir, c.Env = dir, envs
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, _ := c.StdoutPipe()
			logf, _ := os.Create(filepath.Join(dir, fmt.Sprintf("bg-%d.log", len(bg))))
			c.Stderr = logf
			if err := c.Start(); err != nil {
				t.Fatalf("%s: %v", cmdline, err)
			}
			exited := make(chan struct{})
			bg = append(bg, bgProc{c, exited})
			ready := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					if strings.HasPrefix(sc.Text(), "pctl: broker ready") {
						ready <- sc.Text()
					}
				}
				io.Copy(io.Discard, out)
				c.Wait()
				close(exited)
			}()
			if strings.Contains(cmdline, "pctl serve") {
				select {
				case <-ready:
				case <-exited:
					b, _ := os.ReadFile(logf.Name())
					t.Fatalf("%s exited before it was ready; stderr:\n%s", cmdline, b)
				case <-time.After(90 * time.Second):
					b, _ := os.ReadFile(logf.Name())
					t.Fatalf("%s printed no ready line within 90s; stderr:\n%s", cmdline, b)
				}
			} else if m := regexp.MustCompile(`node-(\d)\.conf`).FindStringSubmatch(cmdline); m != nil {
				waitPort(t, base+int(m[1][0]-'1'), logf.Name())
			}
			continue
		}
		c := exec.CommandContext(ctx, "bash", "-c", line)
		c.Dir, c.Env = dir, envs
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("$ %s\n%s", line, out)
		if strings.Contains(line, "pctl consume") {
			consumed = string(out)
		}
	}
	for _, rec := range []string{"alice\t1", "bob\t2", "alice\t3"} {
		if !strings.Contains(consumed, rec) {
			t.Errorf("the consumer did not print %q:\n%s", rec, consumed)
		}
	}
	// The replicas, as the cluster reports them.
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(dir, "cluster", "admin.nk"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", base), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for q := range 4 {
		msg, err := nc.Request("$JS.API.STREAM.INFO."+wire.StreamName("orders", q), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Config struct {
				Replicas int `json:"num_replicas"`
			} `json:"config"`
		}
		if err := json.Unmarshal(msg.Data, &info); err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 {
			t.Errorf("partition %d stream has %d replicas, want 3: %s", q, info.Config.Replicas, msg.Data)
		}
	}
}

// readmeBlock returns the commands of the first ```sh block after heading in README.md, one per
// line, comments removed.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README.md has no heading %q", heading)
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("README.md: no ```sh block after %q", heading)
	}
	block, _, _ := strings.Cut(after, "```")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, "    #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// consecutivePorts returns the first of 9 consecutive free ports (3 client, 3 route, 3 monitoring).
func consecutivePorts(t *testing.T) int {
	t.Helper()
	for try := 0; try < 50; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		base := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if base+9 > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+9 && ok; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no 9 consecutive free ports")
	return 0
}

func waitPort(t *testing.T, port int, log string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(log)
			t.Fatalf("nothing listens on port %d after 30s; the node's log:\n%s", port, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
