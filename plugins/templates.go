package plugins

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// The plugin templates of `pctl plugin new`: one minimal partitioner, the same
// function in four languages (templates/<lang>/), each with a build.sh that
// builds it with one command, and its build committed beside it
// (templates/<lang>/my-partitioner.wasm). See plugins/AUTHORING.md.
//
// The source files are listed one by one, not as directories, so that build
// outputs and installed dependencies (an AssemblyScript node_modules) never
// end up in the pctl binary.
//
//go:embed templates/c/README.md templates/c/build.sh templates/c/partitioner.c templates/c/pctl_abi.h
//go:embed templates/go/README.md templates/go/build.sh templates/go/main.go templates/go/go.mod.tmpl
//go:embed templates/rust/README.md templates/rust/build.sh templates/rust/src/lib.rs
//go:embed templates/assemblyscript/README.md templates/assemblyscript/build.sh templates/assemblyscript/.gitignore
//go:embed templates/assemblyscript/package.json templates/assemblyscript/package-lock.json
//go:embed templates/assemblyscript/assembly/index.ts templates/assemblyscript/assembly/tsconfig.json
var templateFiles embed.FS

//go:embed templates/*/my-partitioner.wasm
var templateBuilds embed.FS

// TemplateName is the plugin name the templates are written with: their
// metadata name, their output file (TemplateName + ".wasm") and their package
// or module name. A project made from a template replaces every occurrence of
// it with the project's own plugin name.
const TemplateName = "my-partitioner"

// TemplateSuffix ends the stored name of a template file that must be written
// out without it. Only the Go template's go.mod.tmpl has it: a file named
// go.mod would make templates/go a Go module of its own, and go:embed cannot
// reach into another module.
const TemplateSuffix = ".tmpl"

// templateLangs are the template languages, sorted.
var templateLangs = []string{"assemblyscript", "c", "go", "rust"}

// TemplateLangs returns the languages there are templates for, sorted:
// assemblyscript, c, go, rust. The slice is a fresh copy.
func TemplateLangs() []string {
	return append([]string(nil), templateLangs...)
}

func checkLang(lang string) error {
	i := sort.SearchStrings(templateLangs, lang)
	if i == len(templateLangs) || templateLangs[i] != lang {
		return fmt.Errorf("no plugin template for language %q; there are templates for %s", lang, strings.Join(templateLangs, ", "))
	}
	return nil
}

// Template returns the source files of the template for lang (one of
// TemplateLangs), rooted at the project directory: README.md, build.sh and
// the sources. To make a project from it, write every file out with
// TemplateName replaced by the plugin name, a name ending in TemplateSuffix
// without that suffix, and build.sh executable. `pctl plugin new` does that.
//
// The templates are written so that a project needs nothing from this
// repository: the C template carries its own copy of pctl_abi.h, the Go one
// its own go.mod, the AssemblyScript one its package-lock.json.
func Template(lang string) (fs.FS, error) {
	if err := checkLang(lang); err != nil {
		return nil, err
	}
	return fs.Sub(templateFiles, "templates/"+lang)
}

// TemplateModule returns the committed build of the template for lang: what
// its build.sh produces, with the pinned toolchains, for a project made with
// the default name (TemplateName). All four give the same partitions for
// every key, n and seed; the Go one has the wasi-deterministic profile, the
// others are portable. The returned slice is shared: do not modify it.
func TemplateModule(lang string) ([]byte, error) {
	if err := checkLang(lang); err != nil {
		return nil, err
	}
	return templateBuilds.ReadFile("templates/" + lang + "/" + TemplateName + ".wasm")
}
