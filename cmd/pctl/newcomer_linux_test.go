package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"pctl.dev/pctl/broker"
)

// openPTY opens a pseudo-terminal pair and returns its terminal side (what a shell's stdout is).
func openPTY(t *testing.T) *os.File {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// TestBinaryNotToTerminal: 'plugin export' and 'plugin get' refuse to write a module to a
// terminal, and write it to anything else, /dev/null included (a character device but not a
// terminal, which the old check refused).
func TestBinaryNotToTerminal(t *testing.T) {
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	b := testBroker(t)
	tty := openPTY(t)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	conn := []string{"--server", b.ClientURL(), "--creds", b.CredsPath(broker.RoleAdmin)}
	for _, tc := range []struct {
		name string
		run  func(*env, []string) int
		args []string
	}{
		{"plugin export", cmdPluginExport, []string{"jump"}},
		{"plugin get", cmdPluginGet, append([]string{"jump"}, conn...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, out := range []struct {
				name string
				f    *os.File
				code int
			}{{"terminal", tty, exitUsage}, {"/dev/null", devnull, exitOK}} {
				var stderr bytes.Buffer
				e := &env{ctx: context.Background(), stdin: strings.NewReader(""), stdout: out.f, stderr: &stderr, getenv: func(string) string { return "" }}
				code := tc.run(e, tc.args)
				if code != out.code {
					t.Errorf("to a %s: exit %d, want %d: %s", out.name, code, out.code, stderr.String())
				}
				if out.code == exitUsage && !strings.Contains(stderr.String(), "refusing to write a binary module to a terminal") {
					t.Errorf("to a %s: %s", out.name, stderr.String())
				}
			}
		})
	}
}

// TestRustTemplateBuildsWithoutHandEditing: the Rust template's build.sh works when the rustc on
// PATH has no wasm32 standard library but Debian's /usr/bin/rustc has (it used to stop and ask
// the user to change their toolchain), and when no rustc has it, it runs 'rustup target add'
// itself and, that failing (no network), says exactly what to run. The stub rustc stands for
// rustup's toolchain without the target; the stub rustup records what it was asked.
func TestRustTemplateBuildsWithoutHandEditing(t *testing.T) {
	sysroot, err := exec.Command("/usr/bin/rustc", "--print", "sysroot").Output()
	if err != nil || !dirExists(filepath.Join(strings.TrimSpace(string(sysroot)), "lib", "rustlib", "wasm32-unknown-unknown")) {
		if pnRequireToolchains() {
			t.Fatal("PCTL_REQUIRE_TOOLCHAINS=1: /usr/bin/rustc with the wasm32-unknown-unknown target is missing (scripts/install-toolchains.sh)")
		}
		t.Skip("needs /usr/bin/rustc with the wasm32-unknown-unknown target (Debian: rustc libstd-rust-dev-wasm32)")
	}
	dir := t.TempDir()
	if code, _, errs := pnRun(t, "plugin", "new", "--lang", "rust", filepath.Join(dir, "user-shard")); code != exitOK {
		t.Fatal(errs)
	}
	stubs := filepath.Join(dir, "stubs")
	noTarget := filepath.Join(dir, "sysroot-without-wasm32")
	for _, d := range []string{stubs, filepath.Join(noTarget, "lib", "rustlib", "x86_64-unknown-linux-gnu")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeExe := func(name, body string) {
		if err := os.WriteFile(filepath.Join(stubs, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeExe("rustc", fmt.Sprintf("[ \"$1 $2\" = \"--print sysroot\" ] && { echo %s; exit 0; }\necho stub rustc cannot build >&2; exit 1\n", noTarget))
	rustupLog := filepath.Join(dir, "rustup.log")
	writeExe("rustup", fmt.Sprintf("echo \"$@\" >> %s\necho 'error: could not download the target (no network)' >&2\nexit 1\n", rustupLog))
	build := filepath.Join(dir, "user-shard", "build.sh")
	env := []string{"PATH=" + stubs + ":/usr/bin:/bin", "HOME=" + dir}

	t.Run("rustc on PATH lacks the target, /usr/bin/rustc has it", func(t *testing.T) {
		cmd := exec.Command(build)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		wasm, err := os.ReadFile(filepath.Join(dir, "user-shard", "user-shard.wasm"))
		if err != nil || !bytes.HasPrefix(wasm, []byte("\x00asm")) {
			t.Fatalf("no module built: %v", err)
		}
		if _, err := os.Stat(rustupLog); err == nil {
			t.Error("rustup was run although /usr/bin/rustc has the target")
		}
	})

	t.Run("no rustc has the target", func(t *testing.T) {
		// Hide /usr/bin/rustc behind the stub, in a mount namespace of the build's own.
		if err := exec.Command("unshare", "-m", "true").Run(); err != nil {
			t.Skipf("needs unshare -m (root) to hide /usr/bin/rustc: %v", err)
		}
		cmd := exec.Command("unshare", "-m", "sh", "-c", `mount --bind "$0" /usr/bin/rustc && exec "$1"`, filepath.Join(stubs, "rustc"), build)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("build.sh succeeded without any usable rustc:\n%s", out)
		}
		for _, want := range []string{
			"running: rustup target add wasm32-unknown-unknown",
			"rustup target add wasm32-unknown-unknown   ",
			"apt-get install rustc libstd-rust-dev-wasm32",
		} {
			if !strings.Contains(string(out), want) {
				t.Errorf("build.sh output lacks %q:\n%s", want, out)
			}
		}
		if log, _ := os.ReadFile(rustupLog); strings.TrimSpace(string(log)) != "target add wasm32-unknown-unknown" {
			t.Errorf("rustup was asked %q, want \"target add wasm32-unknown-unknown\"", log)
		}
	})
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
