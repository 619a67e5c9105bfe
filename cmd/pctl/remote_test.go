package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// listRemote runs `pctl plugin list --remote` the way plugin.go's `plugin list` hands over to it.
func (p *pctlAs) listRemote(args ...string) cliResult {
	p.t.Helper()
	var stdout, stderr syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &env{ctx: ctx, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	full := append(append([]string{"--remote"}, args...), "--server", p.url, "--creds", p.creds)
	code := cmdPluginListRemote(e, full)
	return cliResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestPluginRemote(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	dir := t.TempDir()
	wasm, err := plugins.TemplateModule("c")
	if err != nil {
		t.Fatal(err)
	}
	digest := runtime.Digest(wasm)
	file := filepath.Join(dir, "my-partitioner.wasm")
	if err := os.WriteFile(file, wasm, 0o644); err != nil {
		t.Fatal(err)
	}

	r := admin.run("", "plugin", "upload", file)
	expect(t, r, exitOK, "uploaded my-partitioner", "sha256:"+digest)
	r = admin.run("", "plugin", "upload", file, "--json") // idempotent
	var info wire.PluginInfo
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Digest != digest {
		t.Fatalf("upload --json: %v: %s", err, r)
	}

	r = admin.listRemote()
	expect(t, r, exitOK, "my-partitioner", "uploaded", "kafka-murmur2", "built-in", "sha256:"+digest[:12])
	r = admin.listRemote("--json")
	var list []wire.PluginInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list --remote --json: %v: %s", err, r)
	}
	found := false
	for _, p := range list {
		found = found || p.Digest == "sha256:"+digest // as the table shows digests
	}
	if !found {
		t.Fatalf("list --remote --json does not list the uploaded plugin: %s", r)
	}

	out := filepath.Join(dir, "got.wasm")
	r = admin.run("", "plugin", "get", digest, "-o", out)
	expect(t, r, exitOK, "verified")
	if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, wasm) {
		t.Fatalf("plugin get wrote different bytes (%v)", err)
	}
	r = admin.run("", "plugin", "get", "sha256:"+digest[:10]) // a unique prefix, to stdout
	expect(t, r, exitOK)
	if r.stdout != string(wasm) {
		t.Fatalf("plugin get by prefix: %d bytes on stdout, want the %d-byte module", len(r.stdout), len(wasm))
	}

	// In use: a topic's epoch needs it.
	expect(t, admin.run("", "topic", "create", "t", "--partitions", "3", "--partitioner", digest[:12]), exitOK, "my-partitioner")
	r = admin.run("", "plugin", "delete", digest)
	expect(t, r, exitFailure, "used by topic(s) t")
	expect(t, admin.listRemote(), exitOK, "my-partitioner", " t\n")
	expect(t, admin.run("", "topic", "delete", "t"), exitOK)
	expect(t, admin.run("", "plugin", "delete", digest), exitOK, "deleted plugin sha256:"+digest)
	expect(t, admin.run("", "plugin", "get", digest), exitUsage, "no plugin with digest")
	expect(t, admin.run("", "plugin", "delete", digest), exitUsage, "no plugin")
}

func TestPluginRemoteErrors(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	dir := t.TempDir()
	good, _ := plugins.TemplateModule("c")
	goodFile := filepath.Join(dir, "good.wasm")
	os.WriteFile(goodFile, good, 0o644)
	// A module that breaks the ABI: it returns a partition out of range.
	badFile := filepath.Join("..", "..", "runtime", "testdata", "hostile", "out-of-range.wasm")

	tests := []struct {
		name string
		p    *pctlAs
		args []string
		code int
		want []string
	}{
		{"rejected upload shows the failures", admin, []string{"plugin", "upload", badFile}, exitFailure, []string{"rejected", "FAIL range:", "out of range", "pctl conformance"}},
		{"missing file", admin, []string{"plugin", "upload", filepath.Join(dir, "nope.wasm")}, exitUsage, []string{"nope.wasm: no such file"}},
		{"empty file", admin, []string{"plugin", "upload", emptyFile(t, dir)}, exitUsage, []string{"no module bytes"}},
		{"producer may not upload", cliFor(t, b, broker.RoleProducer), []string{"plugin", "upload", goodFile}, exitFailure, []string{"this needs the admin role"}},
		{"unknown plugin get", admin, []string{"plugin", "get", strings.Repeat("0", 64)}, exitUsage, []string{"no plugin with digest"}},
		{"unknown plugin name", admin, []string{"plugin", "get", "nope"}, exitUsage, []string{`"nope" is not a built-in`}},
		{"built-ins cannot be deleted", admin, []string{"plugin", "delete", "jump"}, exitUsage, []string{"built-in"}},
		{"consumer may not delete", cliFor(t, b, broker.RoleConsumer), []string{"plugin", "delete", "jump"}, exitFailure, []string{"this needs the admin role"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, tc.p.run("", tc.args...), tc.code, tc.want...)
		})
	}
	// A built-in is fetched by name and verified like any other.
	r := admin.run("", "plugin", "get", "jump")
	want, _ := plugins.Builtin("jump")
	if r.code != exitOK || r.stdout != string(want) {
		t.Fatalf("plugin get jump: %d bytes: %s", len(r.stdout), r.stderr)
	}
}

func emptyFile(t *testing.T, dir string) string {
	p := filepath.Join(dir, "empty.wasm")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHasRemoteFlag(t *testing.T) {
	tests := []struct {
		args []string
		want bool
	}{
		{[]string{"--remote"}, true},
		{[]string{"-remote"}, true},
		{[]string{"--json", "--remote"}, true},
		{[]string{"--remote=true"}, true},
		{[]string{"--remote=false"}, false},
		{[]string{"--json"}, false},
		{[]string{"--", "--remote"}, false},
		{[]string{"remote"}, false},
		{nil, false},
	}
	for _, tc := range tests {
		if got := hasRemoteFlag(tc.args); got != tc.want {
			t.Errorf("hasRemoteFlag(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
