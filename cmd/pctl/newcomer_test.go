package main

// What a new user tripped on (issue 18), each pinned by a test that failed before the fix.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/client"
)

// TestNewcomerWording runs the commands whose messages were wrong or doubled, against one real
// broker, and checks each message's words.
func TestNewcomerWording(t *testing.T) {
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	if r := admin.run("", "topic", "create", "orders", "--partitions", "2", "--partitioner", "jump"); r.code != exitOK {
		t.Fatal(r)
	}
	notSeed := filepath.Join(t.TempDir(), "not-a-seed.nk")
	if err := os.WriteFile(notSeed, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := strings.TrimPrefix(b.ClientURL(), "nats://")
	tests := []struct {
		name    string
		p       *pctlAs
		stdin   string
		args    []string
		code    int
		want    []string
		notWant []string
	}{
		{"a bad group is called a group", admin, "", []string{"consume", "orders", "--group", "bad group", "--idle-exit", "1s"},
			exitUsage, []string{`--group: "bad group": a group name is 1 to 64 characters`}, []string{"topic name", "bad request:"}},
		{"a bad member id is called a member id", admin, "", []string{"consume", "orders", "--group", "g", "--member", "a b", "--idle-exit", "1s"},
			exitUsage, []string{"a member id is 1 to 64 characters"}, []string{"topic name", "group name"}},
		{"a bad seed file is named once", &pctlAs{t: t, url: b.ClientURL(), creds: notSeed}, "", []string{"topic", "list"},
			exitUsage, []string{"pctl topic list: credentials " + notSeed + ": "}, []string{"pctl: credentials", "bad request"}},
		{"one record is one record", cliFor(t, b, broker.RoleProducer), "alice\t1\n", []string{"produce", "orders"},
			exitOK, []string{"orders: 1 record, 1 acknowledged"}, []string{" 1 records,"}},
		{"deleting a topic that does not exist does not suggest creating it", admin, "", []string{"topic", "delete", "nope"},
			exitUsage, []string{`topic "nope" does not exist, so there is nothing to delete`, "pctl topic list"}, []string{"create"}},
		{"an http:// server is refused", &pctlAs{t: t, url: "http://" + port, creds: b.CredsPath(broker.RoleAdmin)}, "", []string{"topic", "list"},
			exitUsage, []string{"http:// is not a NATS scheme; use nats://" + port}, nil},
		{"an https:// server is refused", &pctlAs{t: t, url: "nats://" + port + ",https://" + port, creds: b.CredsPath(broker.RoleAdmin)}, "", []string{"topic", "list"},
			exitUsage, []string{`server URL "https://` + port + `": https:// is not a NATS scheme`}, nil},
		{"a bare HOST:PORT still works", &pctlAs{t: t, url: port, creds: b.CredsPath(broker.RoleAdmin)}, "", []string{"topic", "list"},
			exitOK, []string{"orders"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.t = t
			r := tc.p.run(tc.stdin, tc.args...)
			expect(t, r, tc.code, tc.want...)
			for _, w := range tc.notWant {
				if strings.Contains(r.stderr, w) {
					t.Errorf("stderr says %q: %s", w, r.stderr)
				}
			}
			if tc.code != exitOK && strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
				t.Errorf("want one line on stderr: %s", r.stderr)
			}
		})
	}

	t.Run("serve --nats http:// is refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // the old code served
		defer cancel()
		r := runCLI(ctx, nil, strings.NewReader(""), "serve", "--nats", "http://"+port, "--creds", b.CredsPath(broker.RoleAdmin), "--data", t.TempDir())
		expect(t, r, exitUsage, "pctl serve: --nats: server URL", "http:// is not a NATS scheme")
	})
}

// TestDigestsInJSONHaveTheirPrefix: the JSON of 'plugin list', 'plugin list --remote' and
// 'plugin inspect' gives digests as the tables do, sha256:<64 hex>, each equal to the SHA-256 of
// the module's bytes (computed here).
func TestDigestsInJSONHaveTheirPrefix(t *testing.T) {
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	jump, err := os.ReadFile("../../plugins/builtin/jump.wasm")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(jump)
	want := "sha256:" + hex.EncodeToString(sum[:])
	find := func(t *testing.T, out string) {
		t.Helper()
		var list []struct{ Name, Digest string }
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		for _, p := range list {
			if !strings.HasPrefix(p.Digest, "sha256:") || len(p.Digest) != len("sha256:")+64 {
				t.Errorf("%s: digest %q, want sha256:<64 hex>", p.Name, p.Digest)
			}
			if p.Name == "jump" && p.Digest != want {
				t.Errorf("jump: digest %s, want %s", p.Digest, want)
			}
		}
	}
	out, _, code := runPctl(t, "", "plugin", "list", "--json")
	if code != exitOK {
		t.Fatal(code)
	}
	t.Run("plugin list", func(t *testing.T) { find(t, out) })
	r := admin.run("", "plugin", "list", "--remote", "--json")
	if r.code != exitOK {
		t.Fatal(r)
	}
	t.Run("plugin list --remote", func(t *testing.T) { find(t, r.stdout) })
	out, _, code = runPctl(t, "", "plugin", "inspect", "jump", "--json")
	if code != exitOK || !strings.Contains(out, `"digest": "`+want+`"`) {
		t.Fatalf("plugin inspect --json: exit %d\n%s", code, out)
	}
}

// TestUploadedPluginByName: an uploaded plugin is usable by the name 'plugin list --remote'
// shows, and by a 12-digit digest prefix even through the client library (the CLI used to
// complete prefixes itself; other clients could not); a name two uploads share is refused with
// both digests; a built-in's name always means the built-in. The two uploads are the Rust and C
// templates: the same function and name, different bytes.
func TestUploadedPluginByName(t *testing.T) {
	t.Setenv("PCTL_CACHE_DIR", t.TempDir())
	b := testBroker(t)
	admin := cliFor(t, b, broker.RoleAdmin)
	rust := "../../plugins/templates/rust/my-partitioner.wasm"
	cTmpl := "../../plugins/templates/c/my-partitioner.wasm"
	digest := func(path string) string {
		wasm, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(wasm)
		return hex.EncodeToString(sum[:])
	}
	rustD, cD := digest(rust), digest(cTmpl)
	if r := admin.run("", "plugin", "upload", rust); r.code != exitOK {
		t.Fatal(r)
	}
	r := admin.run("", "topic", "create", "by-name", "--partitions", "3", "--partitioner", "my-partitioner", "--json")
	expect(t, r, exitOK, rustD)

	// A 12-digit prefix through the client library: the broker resolves it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, client.Options{URL: b.ClientURL(), Creds: b.CredsPath(broker.RoleAdmin)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if info, err := c.PluginInfo(ctx, rustD[:12]); err != nil || info.Digest != rustD {
		t.Fatalf("plugin info by a 12-digit prefix: %+v, %v", info, err)
	}

	r = admin.run("", "plugin", "inspect", "--remote", "my-partitioner")
	expect(t, r, exitOK, "broker, uploaded", "sha256:"+rustD)
	if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), "used by by-name") {
		t.Errorf("inspect --remote does not say the topic uses it:\n%s", r.stdout)
	}

	// A second upload with the same name makes the name ambiguous, everywhere.
	if r := admin.run("", "plugin", "upload", cTmpl); r.code != exitOK {
		t.Fatal(r)
	}
	r = admin.run("", "topic", "create", "ambiguous", "--partitions", "3", "--partitioner", "my-partitioner")
	expect(t, r, exitUsage, `plugin name "my-partitioner" is ambiguous`, "sha256:"+rustD, "sha256:"+cD)
	r = admin.run("", "plugin", "get", "my-partitioner", "-o", filepath.Join(t.TempDir(), "x.wasm"))
	expect(t, r, exitUsage, "is ambiguous", "sha256:"+rustD, "sha256:"+cD)

	// An upload named like a built-in does not shadow it.
	if r := admin.run("", "plugin", "upload", "../../plugins/murmur2/kafka-murmur2-rust.wasm"); r.code != exitOK {
		t.Fatal(r)
	}
	r = admin.run("", "topic", "create", "builtin", "--partitions", "3", "--partitioner", "kafka-murmur2", "--json")
	expect(t, r, exitOK, digest("../../plugins/builtin/kafka-murmur2.wasm"))

	r = admin.run("", "topic", "create", "none", "--partitions", "3", "--partitioner", "no-such-plugin")
	expect(t, r, exitUsage, `plugin "no-such-plugin" is not a built-in`, "nor the name of an uploaded plugin", "pctl plugin list --remote")
	if strings.Contains(r.stderr, "64 hex digits while") || strings.Contains(r.stderr, "nor a sha256 digest of 64 hex digits") {
		t.Errorf("the message still says only 64 digits will do: %s", r.stderr)
	}
}

// TestConsumeHelpNamesEveryJSONField: every field 'consume --format jsonl' can print is named in
// its --help (producer and pseq were not).
func TestConsumeHelpNamesEveryJSONField(t *testing.T) {
	out, _, code := runPctl(t, "", "consume", "--help")
	if code != exitOK {
		t.Fatal(code)
	}
	rt := reflect.TypeOf(jsonRecord{})
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(out, name) {
			t.Errorf("consume --help does not name the jsonl field %q", name)
		}
	}
}

// TestConformanceConfigEscapedOnce: the config in a reason reads as Go would quote it,
// "mode=fast\n", not "mode=fast\\n".
func TestConformanceConfigEscapedOnce(t *testing.T) {
	code, out, _ := conformanceCLI(t, "jump", "--config", "mode=fast", "--keys", "200")
	if code != exitFailure || !strings.Contains(out, `the config is "mode=fast\n"; drop --config`) || strings.Contains(out, `\\n`) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
