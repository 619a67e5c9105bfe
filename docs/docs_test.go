package docs

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/internal/natscluster"
)

// pages are the Markdown files whose code blocks TestDocBlocks runs (globs, from the root).
var pages = []string{
	"README.md",
	"docs/*.md",
	"sdk/*/README.md",
	"conformance/hosts/README.md",
	"conformance/hosts/*/README.md",
	"plugins/README.md",
	"plugins/AUTHORING.md",
}

func repoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the source")
	}
	return filepath.Dir(filepath.Dir(file))
}

func requireTool(t testing.TB, what string, check func() error) {
	t.Helper()
	if err := check(); err != nil {
		if os.Getenv("PCTL_REQUIRE_TOOLCHAINS") == "1" {
			t.Fatalf("PCTL_REQUIRE_TOOLCHAINS=1: %s: %v", what, err)
		}
		t.Skipf("%s: %v", what, err)
	}
}

func pageFiles(t testing.TB, root string) []string {
	var files []string
	for _, g := range pages {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	sort.Strings(files)
	return files
}

// TestDocConventions: every page follows the conventions of docs/README.md (no command block
// that would never run, a reason for every block that does not run). Offline and fast.
func TestDocConventions(t *testing.T) {
	root := repoRoot(t)
	for _, f := range pageFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		_, problems := ParseBlocks(f, string(text))
		for _, p := range problems {
			t.Error(p)
		}
	}
}

// TestDocBlocks runs every page's code blocks as written: each page in a clean copy of the
// repository (the files git tracks, or would: nothing built, no data directories), in one shell
// session of its own in a network namespace of its own, with the freshly built pctl on PATH.
// The SDKs are set up beforehand in this tree (npm ci, the Python venv, the Java jar: their
// setup scripts need the registries, which the namespace cannot reach) and linked into the
// copy, where the pages' own setup lines find them ready. A block fails the test when a command
// in it fails (bash -e -o pipefail; a program's exit status; any jshell error).
func TestDocBlocks(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every README's commands against real brokers")
	}
	root := repoRoot(t)
	requireTool(t, "unshare -n (a network namespace per page, so that their fixed ports are free)", func() error {
		return exec.Command("unshare", "-n", "true").Run()
	})
	requireTool(t, "git (to copy the repository as a checkout has it)", func() error {
		_, err := exec.LookPath("git")
		return err
	})
	bin, err := natscluster.Binary()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pageFiles(t, root) {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		blocks, _ := ParseBlocks(f, string(text))
		var run []Block
		for _, b := range blocks {
			if b.Runner() != "" && b.NotRun == "" {
				run = append(run, b)
			}
		}
		if len(run) == 0 {
			continue
		}
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) { // -run TestDocBlocks/sdk_node_README.md
			t.Parallel()
			runPage(t, root, bin, run)
		})
	}
}

func runPage(t *testing.T, root, bin string, blocks []Block) {
	start := time.Now()
	defer func() { t.Logf("%s: %v in all", blocks[0].File, time.Since(start).Round(time.Millisecond)) }()
	for _, sdk := range sdksUsed(blocks) {
		setup := filepath.Join(root, "sdk", sdk, "setup")
		cmd := exec.Command(setup)
		cmd.Dir = filepath.Join(root, "sdk", sdk)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("sdk/%s/setup (in this tree, before the page runs): %v\n%s", sdk, err, out)
		}
	}
	t.Logf("SDK setups (%v): %v", sdksUsed(blocks), time.Since(start).Round(time.Millisecond))
	tmp := t.TempDir()
	copyRoot := filepath.Join(tmp, "pctl")
	if err := copyCheckout(root, copyRoot); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"sdk/node/node_modules", "sdk/python/.venv", "sdk/java/target"} {
		if _, err := os.Stat(filepath.Join(root, l)); err == nil {
			if err := os.Symlink(filepath.Join(root, l), filepath.Join(copyRoot, l)); err != nil {
				t.Fatal(err)
			}
		}
	}
	binDir := filepath.Join(tmp, "bin")
	scratch := filepath.Join(tmp, "scratch")
	for _, d := range []string{binDir, scratch, filepath.Join(tmp, "xdg")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "pctl")); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PCTL_") || k == "PATH" || k == "XDG_DATA_HOME" || k == "OLDPWD" || k == "PWD" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "XDG_DATA_HOME="+filepath.Join(tmp, "xdg"))
	s, err := startSession(copyRoot, scratch, env)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	for i, b := range blocks {
		start := time.Now()
		if err := s.run(i, b); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s ran in %v", b, time.Since(start).Round(time.Millisecond))
	}
	if testing.Verbose() {
		t.Logf("what the page printed:\n%s", s.logSince(0))
	}
}

// sdksUsed names the SDKs a page's blocks need set up: its JavaScript, Python and Java blocks,
// and shell lines that use sdk/<name>/.
func sdksUsed(blocks []Block) []string {
	set := map[string]bool{}
	for _, b := range blocks {
		switch b.Runner() {
		case "node":
			set["node"] = true
		case "python":
			set["python"] = true
		case "jshell":
			set["java"] = true
		}
		for _, sdk := range []string{"node", "python", "java"} {
			if strings.Contains(b.Code, "sdk/"+sdk+"/") || strings.Contains(b.File, "sdk/"+sdk+"/") {
				set[sdk] = true
			}
		}
	}
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// copyCheckout copies what a fresh clone of root would hold, plus files not yet committed (git
// ls-files: tracked and untracked, without the ignored ones), keeping modes and times (the SDKs'
// setup scripts compare times).
func copyCheckout(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git ls-files in %s: %v", root, err)
	}
	dirs := map[string]bool{}
	for _, rel := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		if len(rel) == 0 {
			continue
		}
		for d := filepath.Dir(string(rel)); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
		src := filepath.Join(root, string(rel))
		st, err := os.Lstat(src)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		} else if err != nil {
			return err
		}
		to := filepath.Join(dst, string(rel))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
			continue
		case !st.Mode().IsRegular():
			continue
		}
		if err := copyFile(src, to, st.Mode().Perm()); err != nil {
			return err
		}
		if err := os.Chtimes(to, st.ModTime(), st.ModTime()); err != nil {
			return err
		}
	}
	// Directories last (copying into them changed their times): 'find src -newer STAMP' in
	// sdk/java/setup looks at them too.
	for d := range dirs {
		if st, err := os.Stat(filepath.Join(root, d)); err == nil {
			if err := os.Chtimes(filepath.Join(dst, d), st.ModTime(), st.ModTime()); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
