package natscluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the pctl binary the nodes run: $PCTL_BIN if set, else this module's ./cmd/pctl,
// built once per process with the go command. The build goes to a directory under os.TempDir()
// named after the module's source directory, so that test processes of one checkout share one
// file (each rebuild replaces it atomically; Go's build cache makes it quick) and checkouts never
// mix.
func Binary() (string, error) {
	if p := os.Getenv("PCTL_BIN"); p != "" {
		return checkBin(p, "$PCTL_BIN")
	}
	buildOnce.Do(func() { buildPath, buildErr = build() })
	return buildPath, buildErr
}

func binFor(explicit string) (string, error) {
	if explicit != "" {
		return checkBin(explicit, "Options.Bin")
	}
	return Binary()
}

func checkBin(p, what string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("natscluster: %s %s: %w", what, p, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("natscluster: %s %s is not an executable file", what, p)
	}
	return abs, nil
}

func build() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("natscluster: cannot find the module's source; set PCTL_BIN to a pctl binary")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "cmd", "pctl")); err != nil {
		return "", fmt.Errorf("natscluster: no source at %s/cmd/pctl to build pctl from; set PCTL_BIN to a pctl binary", root)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("natscluster: building pctl needs the go command (%v); set PCTL_BIN to a pctl binary", err)
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), "pctl-natscluster-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "pctl-build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command(goBin, "build", "-o", tmp.Name(), "./cmd/pctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("natscluster: go build ./cmd/pctl in %s: %v\n%s", root, err, out)
	}
	final := filepath.Join(dir, "pctl")
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", err
	}
	return final, nil
}
