package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// The `pctl plugin` subcommands that talk to a broker's plugin registry. `pctl plugin list
// --remote` is cmdPluginListRemote; plugin.go's `plugin list` hands over to it when it sees
// --remote (see hasRemoteFlag).

func init() {
	pluginSubs["upload"] = command{name: "upload", summary: "upload a plugin to the broker (it must pass conformance)", run: cmdPluginUpload}
	pluginSubs["get"] = command{name: "get", summary: "download a plugin from the broker, verified against its digest", run: cmdPluginGet}
	pluginSubs["delete"] = command{name: "delete", summary: "delete an uploaded plugin from the broker (refused while a topic uses it)", run: cmdPluginDelete}
}

// hasRemoteFlag reports whether args (before "--") set --remote: `plugin list` then lists the
// broker's plugins instead of the built-ins.
func hasRemoteFlag(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "remote" {
			continue
		}
		if !hasVal {
			return true
		}
		b, err := strconv.ParseBool(val)
		return err == nil && b
	}
	return false
}

// resolvePluginRef turns what a user typed into what the broker takes: a built-in name as it is,
// "sha256:" dropped, and a unique digest prefix of 6 to 63 hex digits completed from the
// broker's plugin list. Anything else goes to the broker as it is (which names what it accepts).
func resolvePluginRef(ctx context.Context, c *client.Client, ref string) (string, error) {
	if _, ok := plugins.Builtin(ref); ok {
		return ref, nil
	}
	d := strings.ToLower(strings.TrimPrefix(ref, "sha256:"))
	if _, err := hex.DecodeString(padEven(d)); err != nil || len(d) < 6 || len(d) > 64 {
		return ref, nil
	}
	if len(d) == 64 {
		return d, nil
	}
	list, err := c.Plugins(ctx)
	if err != nil {
		return "", err
	}
	var match []string
	for _, p := range list {
		if strings.HasPrefix(p.Digest, d) {
			match = append(match, p.Digest)
		}
	}
	switch len(match) {
	case 0:
		return "", fmt.Errorf("%w: no plugin's digest starts with %s; see 'pctl plugin list --remote'", wire.ErrNotFound, d)
	case 1:
		return match[0], nil
	}
	return "", fmt.Errorf("%w: digest prefix %s is ambiguous (%d plugins match); give more digits", wire.ErrBadRequest, d, len(match))
}

func padEven(s string) string {
	if len(s)%2 == 1 {
		return s + "0"
	}
	return s
}

func cmdPluginUpload(e *env, args []string) int {
	const cmd = "plugin upload"
	fs := newFlags(e, cmd, "plugin upload FILE.wasm [--json]", `
Uploads a module to the broker's plugin registry. The broker runs conformance on it (see 'pctl
conformance') and refuses a module that fails; the failures are printed. A stored plugin is named
by its digest, the SHA-256 of its bytes: give it to 'pctl topic create --partitioner'. Uploading
the same bytes again is harmless. Needs the admin role.
`+connHelp)
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print the stored plugin's description as JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, cmd, "give exactly one .wasm file")
	}
	wasm, err := os.ReadFile(pos[0])
	if err != nil {
		return usageErr(e, cmd, "%s: %v", pos[0], unwrapPath(err))
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	info, err := c.UploadPlugin(e.ctx, wasm)
	if err != nil {
		var re *wire.RemoteError
		if errors.Is(err, wire.ErrPluginRejected) && errors.As(err, &re) {
			return rejected(e, cmd, pos[0], re)
		}
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, info)
	}
	fmt.Fprintf(e.stdout, "uploaded %s %s sha256:%s\n", info.Name, info.Version, info.Digest)
	fmt.Fprintf(e.stdout, "  %d bytes, profile %s, ancestry %s\n", info.Size, info.Profile, ancestryState(*info))
	return exitOK
}

func ancestryState(info wire.PluginInfo) string {
	if info.AncestryVerified {
		return "declared and verified"
	}
	for _, p := range info.Properties {
		if p == "ancestry" {
			return "declared, not verified"
		}
	}
	return "not declared"
}

// rejected prints a refused upload: the broker's summary, then each failed conformance check
// from the report in the error's detail. Exit status 1.
func rejected(e *env, cmd, file string, re *wire.RemoteError) int {
	fmt.Fprintf(e.stderr, "pctl %s: %s was rejected: it fails conformance\n", cmd, file)
	var rep struct {
		Results []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
			Reason string `json:"reason"`
		} `json:"results"`
	}
	n := 0
	if len(re.Detail) > 0 && json.Unmarshal(re.Detail, &rep) == nil {
		for _, r := range rep.Results {
			if r.Status == "fail" {
				fmt.Fprintf(e.stderr, "  FAIL %s: %s\n", r.Name, oneLine(r.Reason))
				n++
			}
		}
	}
	if n == 0 {
		fmt.Fprintf(e.stderr, "  %s\n", oneLine(re.Message))
	}
	fmt.Fprintf(e.stderr, "run 'pctl conformance %s' for the full report\n", file)
	return exitFailure
}

func cmdPluginGet(e *env, args []string) int {
	const cmd = "plugin get"
	fs := newFlags(e, cmd, "plugin get DIGEST|NAME [-o FILE]", `
Downloads a plugin's module from the broker (an uploaded plugin by digest, or a built-in by name),
checks that its bytes hash to the digest, and writes them to standard output or FILE.
`+connHelp)
	cf := addConnFlags(fs)
	outFile := fs.String("o", "", "write to `FILE` instead of standard output")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, cmd, "give exactly one plugin digest or built-in name")
	}
	if *outFile == "" && isTerminal(e.stdout) {
		return usageErr(e, cmd, "refusing to write a binary module to a terminal; use -o FILE or redirect (> FILE.wasm)")
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	ref, err := resolvePluginRef(e.ctx, c, pos[0])
	if err != nil {
		return exitFor(e, cmd, err)
	}
	wasm, err := c.Module(e.ctx, ref)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	digest := runtime.Digest(wasm)
	if len(ref) == 64 && digest != ref {
		return failErr(e, cmd, fmt.Errorf("the bytes received hash to sha256:%s, not %s: refusing them", digest, ref))
	}
	if *outFile != "" {
		if err := os.WriteFile(*outFile, wasm, 0o644); err != nil {
			return failErr(e, cmd, err)
		}
		fmt.Fprintf(e.stderr, "wrote %s: %d bytes, sha256:%s (verified)\n", *outFile, len(wasm), digest)
		return exitOK
	}
	if _, err := e.stdout.Write(wasm); err != nil {
		return failErr(e, cmd, err)
	}
	return exitOK
}

func cmdPluginDelete(e *env, args []string) int {
	const cmd = "plugin delete"
	fs := newFlags(e, cmd, "plugin delete DIGEST", `
Deletes an uploaded plugin from the broker. The broker refuses while any epoch of any topic uses
it (consumers need every epoch's function to keep per-key order): delete those topics first.
Built-ins cannot be deleted. Needs the admin role.
`+connHelp)
	cf := addConnFlags(fs)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, cmd, "give exactly one plugin digest")
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	ref, err := resolvePluginRef(e.ctx, c, pos[0])
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if err := c.DeletePlugin(e.ctx, ref); err != nil {
		return exitFor(e, cmd, err)
	}
	fmt.Fprintf(e.stdout, "deleted plugin sha256:%s\n", strings.TrimPrefix(ref, "sha256:"))
	return exitOK
}

// cmdPluginListRemote is `pctl plugin list --remote`: the broker's plugins, built-ins first, with
// the topics that use each.
func cmdPluginListRemote(e *env, args []string) int {
	const cmd = "plugin list"
	fs := newFlags(e, cmd, "plugin list --remote [--json]", `
Lists the plugins the broker knows: its built-ins and every uploaded plugin, with the topics that
use each.
`+connHelp)
	fs.Bool("remote", true, "list the broker's plugins (this command)")
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, cmd, "takes no arguments")
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	list, err := c.Plugins(e.ctx)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if list == nil {
		list = []wire.PluginInfo{}
	}
	if *asJSON {
		// Digests as the table and the other commands show them: sha256:<hex>.
		out := make([]wire.PluginInfo, len(list))
		for i, p := range list {
			p.Digest = "sha256:" + p.Digest
			out[i] = p
		}
		return writeJSON(e, cmd, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tVERSION\tDIGEST\tSIZE\tKIND\tANCESTRY\tUSED BY")
	for _, p := range list {
		kind := "uploaded"
		if p.Builtin {
			kind = "built-in"
		}
		fmt.Fprintf(w, "%s\t%s\tsha256:%s\t%d\t%s\t%s\t%s\n", p.Name, p.Version, short(p.Digest), p.Size, kind, yesNo(p.AncestryVerified), orDash(p.UsedBy))
	}
	_ = w.Flush()
	return exitOK
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

func orDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}
