// Command pctl runs partitioner modules (spec/abi-v1.md) and, with its broker, topics whose
// partitioning can change without breaking per-key order. Run `pctl help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and something failed (a plugin trapped, a record was refused)
	exitUsage   = 2 // bad flags, bad input, unknown names: nothing was done
)

// env is what a command may touch; tests drive commands in-process with their own.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// capture, when set, receives each FlagSet a command builds instead of letting it run
	// ('pctl completion'). A command that parses its arguments without newFlags/parse must
	// return at once when it is set (it must never start anything).
	capture func(*flag.FlagSet)
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) int
}

var commands []command

func register(c command) { commands = append(commands, c) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runCtx(ctx, args, stdin, stdout, stderr)
}

func runCtx(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return runCtx(ctx, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	case "version", "--version":
		fmt.Fprintln(stdout, "pctl", version)
		return exitOK
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(e, args[1:])
		}
	}
	fmt.Fprintf(stderr, "pctl: unknown command %q; run 'pctl help' for the list\n", args[0])
	return exitUsage
}

const version = "0.1.0-dev"

func usage(w io.Writer) {
	fmt.Fprintf(w, `pctl: WebAssembly partitioners that every language and the broker run bit-identically.

Usage: pctl <command> [flags] [args]

Commands:
`)
	cs := append([]command(nil), commands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run 'pctl <command> --help' for a command's flags. Exit status: 0 success, 1 failure at run
time (for example a plugin that traps), 2 bad usage or input (nothing was done).
`)
}

// helpOut maps a command's FlagSet to the stdout that receives its --help text (runs in one
// process, such as tests, each have their own).
var helpOut sync.Map // *flag.FlagSet -> io.Writer

// captureOf maps a FlagSet to a function that wants to see it instead of having the command run
// ('pctl completion' collects every command's flags this way).
var captureOf sync.Map // *flag.FlagSet -> func(*flag.FlagSet)

// newFlags returns a FlagSet whose usage text starts with the command's synopsis and lists the
// flags GNU-style (--name VALUE).
func newFlags(e *env, name, synopsis, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	helpOut.Store(fs, e.stdout)
	if e.capture != nil {
		captureOf.Store(fs, e.capture)
	}
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: pctl %s\n\n%s\n\nFlags:\n", synopsis, strings.TrimSpace(help))
		printFlags(out, fs)
	}
	return fs
}

// printFlags lists a FlagSet's flags GNU-style: "  --name VALUE" and its usage on the next line,
// with the default when it is not the zero value.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  " + flagDashes(f.Name) + f.Name
		if name != "" {
			line += " " + name
		}
		fmt.Fprintln(w, line)
		usage = strings.ReplaceAll(usage, "\n", "\n      ")
		if def := f.DefValue; def != "" && def != "false" && def != "0" && def != "0s" && def != "[]" {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" || strings.ContainsAny(def, " \t") {
				def = fmt.Sprintf("%q", def)
			}
			usage += fmt.Sprintf(" (default %s)", def)
		}
		fmt.Fprintf(w, "      %s\n", usage)
	})
}

// gnuFlag turns the flag package's "-name" in an error message into "--name", as the help shows.
var flagNameRE = regexp.MustCompile(`(^|[ :])-([A-Za-z][A-Za-z0-9-]+)`)

func gnuFlag(msg string) string {
	return flagNameRE.ReplaceAllStringFunc(msg, func(m string) string {
		i := strings.IndexByte(m, '-')
		if len(m)-i-1 == 1 {
			return m
		}
		return m[:i] + "-" + m[i:]
	})
}

// parse parses flags that may be interleaved with positional arguments ("pctl plugin inspect
// x.wasm --json"); "--" ends the flags. It returns the positional arguments, and an exit status
// >= 0 when the command must stop (help was asked: 0; bad flags: 2).
func parse(fs *flag.FlagSet, args []string) ([]string, int) {
	defer helpOut.Delete(fs)
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			out := fs.Output()
			if w, ok := helpOut.Load(fs); ok {
				fs.SetOutput(w.(io.Writer))
			}
			fs.Usage()
			fs.SetOutput(out)
			return nil, exitOK
		}
	}
	if c, ok := captureOf.LoadAndDelete(fs); ok {
		c.(func(*flag.FlagSet))(fs)
		return nil, exitOK
	}
	// Parse quietly: on a bad flag print one line naming it and where the flags are, not the
	// whole help text.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK
			}
			msg := err.Error()
			if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
				if len(name) > 1 && !strings.HasPrefix(name, "-") {
					name = "-" + name
				}
				msg = "unknown flag -" + name
				if hint := closestFlag(fs, strings.TrimLeft(name, "-")); hint != "" {
					msg += "; did you mean --" + hint + "?"
				}
			} else {
				msg = gnuFlag(msg)
			}
			fmt.Fprintf(out, "pctl %s: %s (run 'pctl %s --help' for the flags)\n", fs.Name(), msg, fs.Name())
			return nil, exitUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, -1
		}
		// flag stops at the first non-flag or after "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), -1
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// closestFlag returns the defined flag nearest to a mistyped name (edit distance at most 2), or "".
func closestFlag(fs *flag.FlagSet, name string) string {
	if len(name) < 3 {
		return ""
	}
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// multiFlag collects a repeatable flag (--config K=V --config K2=V2).
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// usageErr prints a one-line usage error and returns exitUsage.
func usageErr(e *env, cmd string, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "pctl %s: %s\n", cmd, fmt.Sprintf(format, args...))
	return exitUsage
}

// failErr prints a one-line run-time failure and returns exitFailure.
func failErr(e *env, cmd string, err error) int {
	fmt.Fprintf(e.stderr, "pctl %s: %v\n", cmd, err)
	return exitFailure
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// count says "1 record", "2 records", "0 records": n and the noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
