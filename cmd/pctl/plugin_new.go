package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"pctl.dev/pctl/plugins"
)

func init() {
	pluginSubs["new"] = command{name: "new", summary: "start a plugin project from a template (C, Go, Rust, AssemblyScript)", run: cmdPluginNew}
}

// templateInfo is what `pctl plugin new` says about each template language.
type templateInfo struct {
	title   string // the language, for people
	source  string // the file to edit
	needs   string // the toolchain build.sh needs
	profile string // the module's import profile
}

var templateInfos = map[string]templateInfo{
	"c":  {title: "C", source: "partitioner.c", needs: "LLVM clang with the wasm32 target, and lld", profile: "portable"},
	"go": {title: "Go", source: "main.go", needs: "Go 1.24 or later", profile: "wasi-deterministic"},
	"rust": {title: "Rust", source: "src/lib.rs",
		needs: "rustc with the wasm32-unknown-unknown target (build.sh finds one, or runs rustup target add wasm32-unknown-unknown)", profile: "portable"},
	"assemblyscript": {title: "AssemblyScript", source: "assembly/index.ts",
		needs: "Node.js 20 or later and npm; the first build runs npm ci", profile: "portable"},
}

// langAliases are other spellings --lang accepts.
var langAliases = map[string]string{"as": "assemblyscript", "rs": "rust", "golang": "go"}

// pluginNameRE is the metadata name rule of spec/abi-v1.md §2.6.
var pluginNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

const pluginNewHelp = `
Writes a new partitioner project into DIR from one of pctl's templates: a minimal, commented
partitioner that implements every export of ABI v1 (spec/abi-v1.md), with a build.sh that builds
it with one command. The four templates compute the same function (FNV-1a-64 of the key, an
optional seed from --config seed=N, MurmurHash3's fmix64, modulo n), so they give identical
partitions; start from the language you know and replace the hash.

  c               freestanding C, clang + lld; portable profile (no imports), ~2 KB
  go              standard Go, GOOS=wasip1 //go:wasmexport; wasi-deterministic profile, ~1.8 MB
  rust            no_std Rust, rustc alone (no cargo); portable, ~3 KB
  assemblyscript  AssemblyScript, compiler pinned by package-lock.json; portable, ~2 KB

The project needs nothing from the pctl repository. DIR is created with its parents; an
existing DIR must be empty (nothing is ever overwritten). NAME, the plugin's metadata name and
the name of its .wasm file, defaults to DIR's last element; it must match [a-z0-9][a-z0-9-]{0,62}.

Then:
  DIR/build.sh                          builds DIR/NAME.wasm
  pctl conformance DIR/NAME.wasm        checks it as every host will
  pctl partition --plugin DIR/NAME.wasm --partitions 12 alice bob

Examples:
  pctl plugin new --lang rust ./user-shard
  pctl plugin new --lang go plugins/tenant --name tenant-hash

The authoring guide (plugins/AUTHORING.md in the pctl repository) explains the ABI in practice
and its pitfalls.
`

func cmdPluginNew(e *env, args []string) int {
	const cmd = "plugin new"
	fs := newFlags(e, cmd, "plugin new --lang c|go|rust|assemblyscript DIR [--name NAME]", pluginNewHelp)
	langFlag := fs.String("lang", "", "template language `LANG`: "+strings.Join(plugins.TemplateLangs(), ", ")+" (required)")
	nameFlag := fs.String("name", "", "plugin `NAME` (default: DIR's last element)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	langs := strings.Join(plugins.TemplateLangs(), ", ")
	lang := strings.ToLower(*langFlag)
	if a, ok := langAliases[lang]; ok {
		lang = a
	}
	switch {
	case *langFlag == "":
		return usageErr(e, cmd, "--lang is required: one of %s", langs)
	case len(pos) != 1:
		return usageErr(e, cmd, "give exactly one directory to create, e.g. 'pctl plugin new --lang %s ./my-partitioner'", lang)
	}
	tmpl, err := plugins.Template(lang)
	if err != nil {
		return usageErr(e, cmd, "--lang %q: no such template; one of %s", *langFlag, langs)
	}
	info := templateInfos[lang]
	dir := pos[0]

	name := *nameFlag
	if name == "" {
		name = filepath.Base(filepath.Clean(dir))
		if !pluginNameRE.MatchString(name) {
			return usageErr(e, cmd, "cannot use %q, the directory's name, as the plugin name: a name is lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters; give one with --name", name)
		}
	} else if !pluginNameRE.MatchString(name) {
		return usageErr(e, cmd, "--name %q: a plugin name is lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters (spec/abi-v1.md §2.6)", name)
	}

	files, err := renderTemplate(tmpl, name)
	if err != nil {
		return failErr(e, cmd, fmt.Errorf("read the %s template: %w", lang, err))
	}

	created, err := prepareDir(dir)
	if err != nil {
		return usageErr(e, cmd, "%v", err)
	}
	if err := writeProject(dir, files); err != nil {
		if created {
			os.RemoveAll(dir)
		}
		return failErr(e, cmd, err)
	}

	names := make([]string, 0, len(files))
	for _, f := range files {
		names = append(names, f.path)
	}
	wasm := filepath.Join(dir, name+".wasm")
	w := e.stdout
	fmt.Fprintf(w, "Created plugin %s (%s, %s profile) in %s:\n  %s\n\n", name, info.title, info.profile, dir, strings.Join(names, "  "))
	fmt.Fprintf(w, "Next:\n")
	fmt.Fprintf(w, "  %s\n", shellQuote(runnable(filepath.Join(dir, "build.sh"))))
	fmt.Fprintf(w, "      builds %s; needs %s\n", wasm, info.needs)
	fmt.Fprintf(w, "  pctl conformance %s\n", shellQuote(runnable(wasm)))
	fmt.Fprintf(w, "      checks it as every host will\n")
	fmt.Fprintf(w, "  pctl partition --plugin %s --partitions 12 alice bob\n", shellQuote(runnable(wasm)))
	fmt.Fprintf(w, "      tries it on keys (add --config seed=42 for another layout)\n")
	fmt.Fprintf(w, "\nThen replace the hash in %s; %s says what else to know.\n",
		filepath.Join(dir, filepath.FromSlash(info.source)), filepath.Join(dir, "README.md"))
	return exitOK
}

// projectFile is one file of a new project.
type projectFile struct {
	path string // slash-separated, relative to the project directory
	data []byte
	mode fs.FileMode
}

// renderTemplate returns a template's files as a project named name has them: TemplateName
// replaced by name (in contents; file names never contain it), TemplateSuffix dropped, scripts
// executable. Sorted by path.
func renderTemplate(tmpl fs.FS, name string) ([]projectFile, error) {
	var files []projectFile
	err := fs.WalkDir(tmpl, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(tmpl, p)
		if err != nil {
			return err
		}
		f := projectFile{path: strings.TrimSuffix(p, plugins.TemplateSuffix), mode: 0o644}
		f.data = []byte(strings.ReplaceAll(string(b), plugins.TemplateName, name))
		if path.Ext(f.path) == ".sh" {
			f.mode = 0o755
		}
		files = append(files, f)
		return nil
	})
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	return files, err
}

// prepareDir makes sure dir exists and is empty, creating it and its parents. It reports
// whether it created dir (so that a failure can remove it again).
func prepareDir(dir string) (created bool, err error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, fmt.Errorf("create %s: %v", dir, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%s: %v", dir, err)
	case !fi.IsDir():
		return false, fmt.Errorf("%s exists and is not a directory; give a new directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("%s: %v", dir, err)
	}
	if len(entries) > 0 {
		return false, fmt.Errorf("%s exists and is not empty (%d entries); give a new or empty directory: pctl plugin new never overwrites files", dir, len(entries))
	}
	return false, nil
}

// writeProject writes files under dir, which exists and is empty. O_EXCL: a file that
// appeared meanwhile is an error, never overwritten.
func writeProject(dir string, files []projectFile) error {
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return err
		}
		_, err = out.Write(f.data)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}

// runnable gives a relative path without a directory a "./", so that a shell runs the file
// and pctl reads it as a file, not as a built-in's name.
func runnable(p string) string {
	if !filepath.IsAbs(p) && !strings.ContainsRune(p, filepath.Separator) {
		return "." + string(filepath.Separator) + p
	}
	return p
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=+,@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
