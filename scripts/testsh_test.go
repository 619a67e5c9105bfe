// Package scripts holds checks of the repository's scripts. TestNoRaceStepCoversFullSizeTests
// keeps scripts/test.sh honest: every test that shrinks under the race detector (and points to
// "the run without -race" for its full size) must be run by test.sh's step without -race.
package scripts

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestNoRaceStepCoversFullSizeTests finds, in every package of the module, the identifiers that
// files built only under the race detector declare (raceEnabled, hostsRace...), every top-level
// Test function that uses one (directly or through the package's other functions and methods),
// and requires scripts/test.sh's non-race step to run each of them: its package in
// $norace_pkgs and its name matched by $norace_tests. Before this test, the step ran three
// tests, and in CI TestHosts ran no Go-built module on the wazero interpreter, conformance 1,500
// keys instead of 20,000 and TestHundredThousandRecords a tenth of its records.
func TestNoRaceStepCoversFullSizeTests(t *testing.T) {
	script, err := os.ReadFile("test.sh")
	if err != nil {
		t.Fatal(err)
	}
	tests, pkgs := noRaceStep(t, string(script))
	process := processStep(t, string(script))
	run, err := regexp.Compile(tests)
	if err != nil {
		t.Fatalf("norace_tests in scripts/test.sh is not a regular expression: %v", err)
	}
	shrinking := shrinkingTests(t, "..")
	if len(shrinking) == 0 {
		t.Fatal("no test shrinks under -race: the analysis found nothing (are the race_test.go files gone?)")
	}
	var pkgNames []string
	for pkg := range shrinking {
		pkgNames = append(pkgNames, pkg)
	}
	sort.Strings(pkgNames)
	for _, pkg := range pkgNames {
		for _, name := range shrinking[pkg] {
			switch {
			case process[pkg]:
				t.Logf("./%s/ %s: the whole package runs without -race (process_pkgs)", pkg, name)
			case !pkgs[pkg]:
				t.Errorf("%s in ./%s/ shrinks under -race, but scripts/test.sh's step without -race does not test ./%s/ (add it to norace_pkgs)", name, pkg, pkg)
			case !run.MatchString(name):
				t.Errorf("%s in ./%s/ shrinks under -race, but scripts/test.sh's step without -race does not run it (add it to norace_tests)", name, pkg)
			default:
				t.Logf("./%s/ %s: full size in the step without -race", pkg, name)
			}
		}
	}
	for pkg := range pkgs {
		if shrinking[pkg] == nil {
			t.Errorf("norace_pkgs names ./%s/, where no test shrinks under -race: the step runs it twice for nothing", pkg)
		}
	}
}

// processStep reads process_pkgs from test.sh: packages that the race step leaves out and a step
// without -race runs whole. It checks that both steps say so.
func processStep(t *testing.T, script string) map[string]bool {
	pm := regexp.MustCompile(`(?m)^process_pkgs="([^"]+)"$`).FindStringSubmatch(script)
	if pm == nil {
		return nil
	}
	pkgs := map[string]bool{}
	for _, p := range strings.Fields(pm[1]) {
		pkg := strings.Trim(strings.TrimPrefix(p, "./"), "/")
		pkgs[pkg] = true
		if !strings.Contains(script, "-e pctl.dev/pctl/"+pkg+" ") && !strings.Contains(script, "-e pctl.dev/pctl/"+pkg+")") {
			t.Errorf("process_pkgs names ./%s/, but the race step does not leave it out (grep -v -x -e pctl.dev/pctl/%s)", pkg, pkg)
		}
	}
	ran := false
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "go" && f[1] == "test" && strings.HasSuffix(strings.TrimSpace(line), "$process_pkgs") && !strings.Contains(line, "-race") && !strings.Contains(line, "-run") {
			ran = true
		}
	}
	if !ran {
		t.Error(`scripts/test.sh defines process_pkgs but has no step 'go test ... $process_pkgs' (without -race and -run) that runs them whole`)
	}
	return pkgs
}

// noRaceStep reads norace_tests and norace_pkgs from test.sh and checks that a go test line
// without -race uses them.
func noRaceStep(t *testing.T, script string) (string, map[string]bool) {
	tm := regexp.MustCompile(`(?m)^norace_tests='([^']+)'$`).FindStringSubmatch(script)
	pm := regexp.MustCompile(`(?m)^norace_pkgs="([^"]+)"$`).FindStringSubmatch(script)
	if tm == nil || pm == nil {
		t.Fatal(`scripts/test.sh must define norace_tests='REGEXP' and norace_pkgs="PKG..." for its step without -race`)
	}
	used := false
	for _, line := range strings.Split(script, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "go" && f[1] == "test" && strings.Contains(line, `-run "$norace_tests" $norace_pkgs`) && !strings.Contains(line, "-race") {
			used = true
		}
	}
	if !used {
		t.Fatal(`scripts/test.sh has no step 'go test ... -run "$norace_tests" $norace_pkgs' without -race`)
	}
	pkgs := map[string]bool{}
	for _, p := range strings.Fields(pm[1]) {
		pkgs[strings.Trim(strings.TrimPrefix(p, "./"), "/")] = true
	}
	return tm[1], pkgs
}

// shrinkingTests returns, per package directory (relative to root), the Test functions that use
// an identifier declared only in race-built files.
func shrinkingTests(t *testing.T, root string) map[string][]string {
	dirs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata" || n == "target") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, "_test.go") {
			dirs[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for dir := range dirs {
		names, err := shrinkingIn(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) > 0 {
			rel, _ := filepath.Rel(root, dir)
			out[filepath.ToSlash(rel)] = names
		}
	}
	return out
}

func shrinkingIn(dir string) ([]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	type fn struct {
		uses  map[string]bool // identifiers and selector names used in the body
		isRef bool
	}
	raceIDs := map[string]bool{}
	funcs := map[string]*fn{} // by name: functions, and methods by their method name
	var parsed []*ast.File
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		if raceOnly(af) {
			for _, decl := range af.Decls {
				if g, ok := decl.(*ast.GenDecl); ok {
					for _, spec := range g.Specs {
						if v, ok := spec.(*ast.ValueSpec); ok {
							for _, n := range v.Names {
								raceIDs[n.Name] = true
							}
						}
					}
				}
			}
			continue
		}
		parsed = append(parsed, af)
	}
	if len(raceIDs) == 0 {
		return nil, nil
	}
	var tests []string
	for _, af := range parsed {
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			f := funcs[fd.Name.Name]
			if f == nil {
				f = &fn{uses: map[string]bool{}}
				funcs[fd.Name.Name] = f
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.Ident:
					f.uses[x.Name] = true
				case *ast.SelectorExpr:
					f.uses[x.Sel.Name] = true
				}
				return true
			})
			if fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") && fd.Name.Name != "TestMain" {
				tests = append(tests, fd.Name.Name)
			}
		}
	}
	// Transitively: a function shrinks if it uses a race identifier or a function that shrinks.
	for changed := true; changed; {
		changed = false
		for _, f := range funcs {
			if f.isRef {
				continue
			}
			for u := range f.uses {
				if raceIDs[u] || (funcs[u] != nil && funcs[u].isRef) {
					f.isRef, changed = true, true
					break
				}
			}
		}
	}
	var out []string
	for _, name := range tests {
		if funcs[name].isRef {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// raceOnly reports whether a file is built only with the race detector (//go:build race).
func raceOnly(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				continue
			}
			return expr.Eval(func(tag string) bool { return tag != "race" }) == false && expr.Eval(func(tag string) bool { return true })
		}
	}
	return false
}
