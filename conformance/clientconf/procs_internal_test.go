package clientconf

import (
	"strings"
	"syscall"
	"testing"
)

// TestMemberCutLastLine: a member's last stdout line without its newline is no delivery and no
// bad line when the harness killed the member (SIGKILL can stop a process in the middle of a
// write: a clean-clone CI run failed member-crash on exactly that), and a bad line when the
// member exited by itself. The members are real processes (sh).
func TestMemberCutLastLine(t *testing.T) {
	const whole = `{"topic":"t","partition":1,"epoch":1,"seq":1,"key":"k1","value":"v","producer":"p","pseq":1,"ts":1}`
	const cut = `{"topic":"t","partition":1,"epoch":1,"seq":2,"key":"k2","val`
	cases := []struct {
		name    string
		script  string
		kill    bool
		wantBad int
		wantCut bool
	}{
		{"killed in the middle of a line", "printf '%s\\n%s' '" + whole + "' '" + cut + "'; exec sleep 60", true, 0, true},
		{"exits with a cut line", "printf '%s\\n%s' '" + whole + "' '" + cut + "'", false, 1, false},
		{"killed after whole lines", "printf '%s\\n' '" + whole + "'; exec sleep 60", true, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := startMember([]string{"sh", "-c", c.script}, nil, t.TempDir(), "m1")
			if err != nil {
				t.Fatal(err)
			}
			if c.kill {
				for m.count() == 0 && m.alive() {
					// the whole line is read before the kill, so the cut one is the last
					syscall.Nanosleep(&syscall.Timespec{Nsec: 10e6}, nil)
				}
				m.signal(syscall.SIGKILL)
			}
			<-m.exited
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.got) != 1 || m.got[0].PSeq != 1 {
				t.Errorf("deliveries %+v, want the whole line's only", m.got)
			}
			if m.nbad != c.wantBad {
				t.Errorf("%d bad lines (%s), want %d", m.nbad, strings.Join(m.bad, "; "), c.wantBad)
			}
			if (m.cut != "") != c.wantCut {
				t.Errorf("cut line %q, want one: %v", m.cut, c.wantCut)
			}
		})
	}
}
