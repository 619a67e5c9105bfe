package clientconf

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// line is one input line of the producer command (spec/client-conformance.md §1).
type line struct {
	key   string
	noKey bool
	value string
}

func (l line) text() string {
	if l.noKey {
		return l.value + "\n"
	}
	return l.key + "\t" + l.value + "\n"
}

// result is one stdout line of the producer command.
type result struct {
	PSeq      uint64  `json:"pseq"`
	Acked     bool    `json:"acked"`
	Partition *int    `json:"partition"`
	Epoch     *int    `json:"epoch"`
	Seq       *uint64 `json:"seq"`
	Error     string  `json:"error"`
}

// delivery is one stdout line of the consumer command (pctl consume --format jsonl --timestamps).
type delivery struct {
	Topic     string  `json:"topic"`
	Partition int     `json:"partition"`
	Epoch     int     `json:"epoch"`
	Seq       uint64  `json:"seq"`
	Key       *string `json:"key"`
	KeyB64    *string `json:"key_b64"`
	Producer  string  `json:"producer"`
	PSeq      uint64  `json:"pseq"`
	TS        int64   `json:"ts"`
	Value     *string `json:"value"`
	Tombstone bool    `json:"tombstone"` // a compacted topic's delete (spec/protocol.md §10.2)

	member string
}

// key is the delivery's key, and false for a keyless record.
func (d delivery) key() ([]byte, bool) {
	switch {
	case d.Key != nil:
		return []byte(*d.Key), true
	case d.KeyB64 != nil:
		k, err := base64.StdEncoding.DecodeString(*d.KeyB64)
		if err != nil {
			return []byte(*d.KeyB64), true
		}
		return k, true
	}
	return nil, false
}

// proc is a child process in its own process group, its stderr kept in a file.
type proc struct {
	what    string // "producer" or "member m1"
	cmd     *exec.Cmd
	errPath string
	errf    *os.File
	exited  chan struct{}
	waitErr error
	told    atomic.Bool // the harness signalled it (an exit after that is expected)
	exitAt  time.Time
}

func startProc(what string, argv []string, env []string, dir string, stdin bool) (*proc, io.WriteCloser, io.ReadCloser, error) {
	p := &proc{what: what, exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = procAttr()
	p.errPath = filepath.Join(dir, strings.ReplaceAll(what, " ", "-")+".stderr")
	var err error
	if p.errf, err = os.Create(p.errPath); err != nil {
		return nil, nil, nil, err
	}
	p.cmd.Stderr = p.errf
	var in io.WriteCloser
	if stdin {
		if in, err = p.cmd.StdinPipe(); err != nil {
			return nil, nil, nil, err
		}
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := p.cmd.Start(); err != nil {
		p.errf.Close()
		return nil, nil, nil, fmt.Errorf("start the %s command %q: %w", what, argv[0], err)
	}
	return p, in, out, nil
}

// wait is run once stdout is drained.
func (p *proc) wait() {
	p.waitErr = p.cmd.Wait()
	p.exitAt = time.Now()
	p.errf.Close()
	close(p.exited)
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the process group (so a wrapper script that does not exec is covered).
func (p *proc) signal(sig syscall.Signal) {
	p.told.Store(true)
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	}
}

// stop sends sig and waits up to d for the exit; it kills the group after that and reports false.
func (p *proc) stop(sig syscall.Signal, d time.Duration) bool {
	if !p.alive() {
		return true
	}
	p.signal(sig)
	select {
	case <-p.exited:
		return true
	case <-time.After(d):
		p.signal(syscall.SIGKILL)
		<-p.exited
		return false
	}
}

// stderrTail is the last lines of the process's standard error, for a row's reason.
func (p *proc) stderrTail(n int) string {
	b, _ := os.ReadFile(p.errPath)
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// producer is the producer command, fed its input in phases.
type producer struct {
	*proc
	id    string
	stdin io.WriteCloser
	w     *bufio.Writer
	sent  []line // pseq = index + 1

	mu      sync.Mutex
	results map[uint64]result
	twice   []uint64 // pseqs reported more than once
	bad     []string // stdout lines that are not results
}

func startProducer(argv, env []string, dir, id string) (*producer, error) {
	outf, err := os.Create(filepath.Join(dir, "producer.stdout"))
	if err != nil {
		return nil, err
	}
	p, in, out, err := startProc("producer", argv, env, dir, true)
	if err != nil {
		outf.Close()
		return nil, err
	}
	pr := &producer{proc: p, id: id, stdin: in, w: bufio.NewWriter(in), results: map[uint64]result{}}
	go func() {
		sc := bufio.NewScanner(io.TeeReader(out, outf))
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			b := bytes.TrimSpace(sc.Bytes())
			if len(b) == 0 {
				continue
			}
			var r result
			var probe map[string]json.RawMessage
			if json.Unmarshal(b, &probe) != nil || probe["pseq"] == nil || probe["acked"] == nil || json.Unmarshal(b, &r) != nil {
				pr.mu.Lock()
				if len(pr.bad) < 3 {
					pr.bad = append(pr.bad, string(b))
				}
				pr.mu.Unlock()
				continue
			}
			pr.mu.Lock()
			if _, dup := pr.results[r.PSeq]; dup {
				pr.twice = append(pr.twice, r.PSeq)
			} else {
				pr.results[r.PSeq] = r
			}
			pr.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out)
		outf.Close()
		p.wait()
	}()
	return pr, nil
}

// write gives the producer lines (the next pseqs).
func (p *producer) write(ls []line) error {
	for _, l := range ls {
		if _, err := p.w.WriteString(l.text()); err != nil {
			return fmt.Errorf("write the producer's input: %v (stderr: %s)", err, p.stderrTail(3))
		}
	}
	if err := p.w.Flush(); err != nil {
		return fmt.Errorf("write the producer's input: %v (stderr: %s)", err, p.stderrTail(3))
	}
	p.sent = append(p.sent, ls...)
	return nil
}

func (p *producer) snapshot() (map[uint64]result, []uint64, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[uint64]result, len(p.results))
	for k, v := range p.results {
		m[k] = v
	}
	return m, append([]uint64(nil), p.twice...), append([]string(nil), p.bad...)
}

// member is one consumer command.
type member struct {
	*proc
	name string

	mu   sync.Mutex
	got  []delivery
	bad  []string // stdout lines that are not deliveries
	nbad int
	cut  string // a last line cut short by the harness's kill (not a delivery, not bad)
}

func startMember(argv, env []string, dir, name string) (*member, error) {
	outf, err := os.Create(filepath.Join(dir, name+".stdout"))
	if err != nil {
		return nil, err
	}
	p, _, out, err := startProc("member "+name, argv, env, dir, false)
	if err != nil {
		outf.Close()
		return nil, err
	}
	m := &member{proc: p, name: name}
	go func() {
		br := bufio.NewReaderSize(io.TeeReader(out, outf), 1<<20)
		for {
			line, rerr := br.ReadBytes('\n')
			if rerr != nil && len(line) > 0 && p.told.Load() {
				// The last line, cut short by the harness's kill (spec/client-conformance.md):
				// its record was not committed and is delivered again, so it is no delivery.
				m.mu.Lock()
				m.cut = fmt.Sprintf("%.200s", bytes.TrimSpace(line))
				m.mu.Unlock()
				break
			}
			if len(line) == 0 && rerr != nil {
				break
			}
			b := bytes.TrimSpace(line)
			if len(b) == 0 {
				continue
			}
			var d delivery
			err := json.Unmarshal(b, &d)
			if err == nil && (d.Producer == "" || d.PSeq == 0 || d.TS == 0) {
				err = fmt.Errorf("no producer, pseq or ts")
			}
			m.mu.Lock()
			if err != nil {
				m.nbad++
				if len(m.bad) < 3 {
					m.bad = append(m.bad, fmt.Sprintf("%.200s (%v)", b, err))
				}
			} else {
				d.member = name
				m.got = append(m.got, d)
			}
			m.mu.Unlock()
			if rerr != nil {
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		outf.Close()
		p.wait()
	}()
	return m, nil
}

func (m *member) deliveries() []delivery {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]delivery(nil), m.got...)
}

func (m *member) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.got)
}
