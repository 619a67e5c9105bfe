package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/partitioner/builtin"
	"pctl.dev/pctl/plugins"
	"pctl.dev/pctl/runtime"
)

// pluginSubs are the `pctl plugin` subcommands; other files add to it (upload, new...).
var pluginSubs = map[string]command{}

func init() {
	register(command{name: "plugin", summary: "inspect, list and export plugins (list, inspect, export, ...)", run: cmdPlugin})
	pluginSubs["inspect"] = command{name: "inspect", summary: "show a plugin's digest, ABI, profile, exports and metadata", run: cmdPluginInspect}
	pluginSubs["list"] = command{name: "list", summary: "list the built-in plugins (--remote: the broker's)", run: cmdPluginList}
	pluginSubs["export"] = command{name: "export", summary: "write a built-in's WebAssembly module", run: cmdPluginExport}
}

func cmdPlugin(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stderr
		if len(args) > 0 {
			w = e.stdout
		}
		fmt.Fprintln(w, "Usage: pctl plugin <subcommand> [flags]\n\nSubcommands:")
		for _, name := range sortedKeys(pluginSubs) {
			fmt.Fprintf(w, "  %-10s %s\n", name, pluginSubs[name].summary)
		}
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := pluginSubs[args[0]]
	if !ok {
		return usageErr(e, "plugin", "unknown subcommand %q; one of: %s", args[0], strings.Join(sortedKeys(pluginSubs), ", "))
	}
	return c.run(e, args[1:])
}

type inspectReport struct {
	Source       string           `json:"source"`
	Digest       string           `json:"digest"` // "sha256:<64 hex>", as the tables show it
	Size         int              `json:"size"`
	ABIVersion   int32            `json:"abi_version"`
	Profile      runtime.Profile  `json:"profile"`
	Imports      []string         `json:"imports"`
	Exports      []string         `json:"exports"`
	Metadata     runtime.Metadata `json:"metadata"`
	Ancestry     bool             `json:"ancestry"`
	Batch        bool             `json:"batch"`
	Configurable bool             `json:"configurable"`
	InitialPages uint32           `json:"initial_memory_pages"`
	// With --remote: what the broker says about it.
	Builtin          *bool    `json:"builtin,omitempty"`
	AncestryVerified *bool    `json:"ancestry_verified,omitempty"`
	UsedBy           []string `json:"used_by,omitempty"`
}

func cmdPluginInspect(e *env, args []string) int {
	const cmd = "plugin inspect"
	remote := hasRemoteFlag(args)
	help := "Loads a plugin as the runtime would (any ABI violation is reported) and describes it.\n" +
		"With --remote it describes a plugin the broker has (by name, digest or unique digest prefix,\n" +
		"as 'pctl plugin list --remote' shows them), downloaded and verified against its digest.\n"
	fs := newFlags(e, cmd, "plugin inspect NAME|sha256:DIGEST|FILE.wasm [--json] [--remote]", help+connHelp)
	asJSON := fs.Bool("json", false, "print a JSON object")
	fs.Bool("remote", false, "describe a plugin of the broker's registry instead of a local one")
	cf := addConnFlags(fs)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, cmd, "give exactly one plugin (a built-in name, sha256:DIGEST or a .wasm file; with --remote a name or digest the broker knows)")
	}
	lib, err := newLibrary(e, runtime.Config{})
	if err != nil {
		return failErr(e, cmd, err)
	}
	defer lib.Runtime().Close(e.ctx)
	ref := pos[0]
	var info *wire.PluginInfo
	if remote {
		c, st := cf.connect(e, cmd, nil)
		if st >= 0 {
			return st
		}
		defer c.Close()
		r, err := resolvePluginRef(e.ctx, c, ref)
		if err != nil {
			return exitFor(e, cmd, err)
		}
		if info, err = c.PluginInfo(e.ctx, r); err != nil {
			return exitFor(e, cmd, err)
		}
		wasm, err := c.Module(e.ctx, info.Digest)
		if err != nil {
			return exitFor(e, cmd, err)
		}
		ref = "sha256:" + lib.Add(wasm)
	}
	_, src, err := lib.Resolve(ref)
	if err != nil {
		return openErr(e, cmd, err)
	}
	m, err := lib.Load(e.ctx, ref)
	if err != nil {
		return openErr(e, cmd, err)
	}
	r := inspectReport{Source: src, Digest: "sha256:" + m.Digest, Size: m.Size, ABIVersion: m.ABIVersion, Profile: m.Profile,
		Imports: m.Imports, Exports: m.Exports(), Metadata: m.Metadata, Ancestry: m.HasAncestry && m.Metadata.Has("ancestry"),
		Batch: m.HasBatch, Configurable: m.HasConfigure, InitialPages: m.InitialPages}
	if r.Imports == nil {
		r.Imports = []string{}
	}
	if info != nil {
		kind := "uploaded"
		if info.Builtin {
			kind = "built-in"
		}
		r.Source = "broker, " + kind
		r.Builtin, r.AncestryVerified, r.UsedBy = &info.Builtin, &info.AncestryVerified, info.UsedBy
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return failErr(e, cmd, err)
		}
		return exitOK
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "source\t%s\n", r.Source)
	fmt.Fprintf(w, "name\t%s\n", r.Metadata.Name)
	fmt.Fprintf(w, "version\t%s\n", r.Metadata.Version)
	if r.Metadata.Description != "" {
		fmt.Fprintf(w, "description\t%s\n", r.Metadata.Description)
	}
	fmt.Fprintf(w, "digest\t%s\n", r.Digest)
	fmt.Fprintf(w, "size\t%d bytes\n", r.Size)
	fmt.Fprintf(w, "abi\tv%d\n", r.ABIVersion)
	fmt.Fprintf(w, "profile\t%s\n", r.Profile)
	fmt.Fprintf(w, "imports\t%s\n", orNone(r.Imports))
	fmt.Fprintf(w, "exports\t%s\n", strings.Join(r.Exports, ", "))
	fmt.Fprintf(w, "properties\t%s\n", orNone(r.Metadata.Properties))
	fmt.Fprintf(w, "batch calls\t%s\n", yesNo(r.Batch))
	fmt.Fprintf(w, "configurable\t%s\n", yesNo(r.Configurable))
	fmt.Fprintf(w, "declared ancestry\t%s\n", yesNo(r.Ancestry))
	if info != nil {
		fmt.Fprintf(w, "ancestry verified\t%s\n", yesNo(info.AncestryVerified))
		fmt.Fprintf(w, "used by\t%s\n", orDash(info.UsedBy))
	}
	fmt.Fprintf(w, "initial memory\t%d pages (%d KiB)\n", r.InitialPages, r.InitialPages*64)
	if err := w.Flush(); err != nil {
		return failErr(e, cmd, err)
	}
	return exitOK
}

func cmdPluginList(e *env, args []string) int {
	if hasRemoteFlag(args) {
		return cmdPluginListRemote(e, args)
	}
	fs := newFlags(e, "plugin list", "plugin list [--json]", "Lists the built-in plugins, available by name everywhere without upload.")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, "plugin list", "takes no arguments")
	}
	type entry struct {
		Name        string `json:"name"`
		Digest      string `json:"digest"`
		Size        int    `json:"size"`
		Ancestry    bool   `json:"ancestry"`
		Description string `json:"description"`
	}
	var list []entry
	for _, name := range plugins.BuiltinNames() {
		b, _ := plugins.Builtin(name)
		en := entry{Name: name, Digest: "sha256:" + runtime.Digest(b), Size: len(b)}
		if nb, ok := builtin.Lookup(name); ok {
			en.Description = nb.Description
			en.Ancestry = nb.Ancestry != nil
		}
		list = append(list, en)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(list)
		return exitOK
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tDIGEST\tSIZE\tANCESTRY\tDESCRIPTION")
	for _, en := range list {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", en.Name, en.Digest[:len("sha256:")+12], en.Size, yesNo(en.Ancestry), en.Description)
	}
	_ = w.Flush()
	return exitOK
}

func cmdPluginExport(e *env, args []string) int {
	fs := newFlags(e, "plugin export", "plugin export NAME [-o FILE]",
		"Writes a built-in's embedded WebAssembly module, byte for byte, to standard output or FILE.")
	outFile := fs.String("o", "", "write to `FILE` instead of standard output")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, "plugin export", "give exactly one built-in name; see 'pctl plugin list'")
	}
	b, ok := plugins.Builtin(pos[0])
	if !ok {
		return usageErr(e, "plugin export", "%q is not a built-in; the built-ins are %s", pos[0], strings.Join(plugins.BuiltinNames(), ", "))
	}
	if *outFile != "" {
		if err := os.WriteFile(*outFile, b, 0o644); err != nil {
			return failErr(e, "plugin export", err)
		}
		return exitOK
	}
	if isTerminal(e.stdout) {
		return usageErr(e, "plugin export", "refusing to write a binary module to a terminal; redirect it (> %s.wasm) or use -o FILE", pos[0])
	}
	if _, err := e.stdout.Write(b); err != nil {
		return failErr(e, "plugin export", err)
	}
	return exitOK
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
