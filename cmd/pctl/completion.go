package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

func init() {
	register(command{name: "completion", summary: "print a shell completion script (bash, zsh or fish)", run: cmdCompletion})
}

// subcommandSets are the commands that dispatch to subcommands ("pctl topic create"); their
// subcommands complete after them. A file that adds such a command registers its map here.
var subcommandSets = map[string]map[string]command{
	"plugin": pluginSubs,
	"topic":  topicSubs,
	"nats-server": {
		"config": {name: "config", run: cmdNATSServerConfig},
	},
	"bench": {
		"produce":  {name: "produce", run: cmdBenchProduce},
		"epoch":    {name: "epoch", run: cmdBenchEpoch},
		"backfill": {name: "backfill", run: cmdBenchBackfill},
	},
}

const completionHelp = `
Prints a completion script for the shell: the commands, their subcommands and every command's
flags (taken from the commands themselves, so it is never out of date with this binary).

  bash:  source <(pctl completion bash)            # or: pctl completion bash > /etc/bash_completion.d/pctl
  zsh:   source <(pctl completion zsh)             # or write it as _pctl into a directory of $fpath
  fish:  pctl completion fish > ~/.config/fish/completions/pctl.fish
`

// cmdTree is what completes: top-level commands, their subcommands, and flags per command path
// ("topic create").
type cmdTree struct {
	top   []string
	subs  map[string][]string
	flags map[string][]string
}

func collectTree(e *env) cmdTree {
	t := cmdTree{subs: map[string][]string{}, flags: map[string][]string{}}
	flagsOf := func(c command, path string) {
		var names []string
		ce := *e
		ce.stdout, ce.stderr = io.Discard, io.Discard
		// Commands only build their flags here; should one start work anyway, it finds its
		// context already cancelled.
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		ce.ctx = ctx
		ce.capture = func(fs *flag.FlagSet) {
			fs.VisitAll(func(f *flag.Flag) { names = append(names, flagDashes(f.Name)+f.Name) })
		}
		c.run(&ce, nil)
		sort.Strings(names)
		t.flags[path] = append(names, "--help")
	}
	for _, c := range commands {
		t.top = append(t.top, c.name)
		if subs, ok := subcommandSets[c.name]; ok {
			for _, name := range sortedKeys(subs) {
				t.subs[c.name] = append(t.subs[c.name], name)
				flagsOf(subs[name], c.name+" "+name)
			}
			continue
		}
		flagsOf(c, c.name)
	}
	t.top = append(t.top, "help", "version")
	sort.Strings(t.top)
	return t
}

// flagDashes is how a flag is written: "--name", or "-o" for one letter (as the help shows it).
func flagDashes(name string) string {
	if len(name) == 1 {
		return "-"
	}
	return "--"
}

func cmdCompletion(e *env, args []string) int {
	fs := newFlags(e, "completion", "completion bash|zsh|fish", completionHelp)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, "completion", "name the shell: bash, zsh or fish")
	}
	t := collectTree(e)
	switch pos[0] {
	case "bash":
		writeBash(e.stdout, t)
	case "zsh":
		fmt.Fprintln(e.stdout, "#compdef pctl")
		fmt.Fprintln(e.stdout, "autoload -U +X bashcompinit && bashcompinit")
		writeBash(e.stdout, t)
	case "fish":
		writeFish(e.stdout, t)
	default:
		return usageErr(e, "completion", "unknown shell %q; one of: bash, zsh, fish", pos[0])
	}
	return exitOK
}

func writeBash(w io.Writer, t cmdTree) {
	fmt.Fprintln(w, "# pctl completion for bash (pctl completion bash)")
	fmt.Fprintln(w, "_pctl() {")
	fmt.Fprintln(w, `  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]} sub=${COMP_WORDS[2]} words=""`)
	fmt.Fprintln(w, `  if [ "$COMP_CWORD" -eq 1 ]; then`)
	fmt.Fprintf(w, "    words=%q\n", strings.Join(t.top, " "))
	fmt.Fprintln(w, `  else`)
	fmt.Fprintln(w, `    case "$cmd" in`)
	for _, parent := range sortedKeys(t.subs) {
		fmt.Fprintf(w, "    %s)\n", parent)
		fmt.Fprintln(w, `      if [ "$COMP_CWORD" -eq 2 ]; then`)
		fmt.Fprintf(w, "        words=%q\n", strings.Join(t.subs[parent], " "))
		fmt.Fprintln(w, `      else case "$sub" in`)
		for _, sub := range t.subs[parent] {
			fmt.Fprintf(w, "        %s) words=%q ;;\n", sub, strings.Join(t.flags[parent+" "+sub], " "))
		}
		fmt.Fprintln(w, `      esac; fi ;;`)
	}
	for _, c := range t.top {
		if f, ok := t.flags[c]; ok {
			fmt.Fprintf(w, "    %s) words=%q ;;\n", c, strings.Join(f, " "))
		}
	}
	fmt.Fprintln(w, `    esac`)
	fmt.Fprintln(w, `  fi`)
	fmt.Fprintln(w, `  case "$cur" in -*|"") COMPREPLY=($(compgen -W "$words" -- "$cur")) ;; *) COMPREPLY=($(compgen -W "$words" -- "$cur")); [ ${#COMPREPLY[@]} -eq 0 ] && COMPREPLY=($(compgen -f -- "$cur")) ;; esac`)
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, "complete -o default -F _pctl pctl")
}

// fishFlag is fish's option for a flag: -l name, or -s o for one letter.
func fishFlag(f string) string {
	if strings.HasPrefix(f, "--") {
		return "-l " + f[2:]
	}
	return "-s " + f[1:]
}

func writeFish(w io.Writer, t cmdTree) {
	fmt.Fprintln(w, "# pctl completion for fish (pctl completion fish)")
	fmt.Fprintf(w, "complete -c pctl -n '__fish_use_subcommand' -f -a %q\n", strings.Join(t.top, " "))
	for _, parent := range sortedKeys(t.subs) {
		fmt.Fprintf(w, "complete -c pctl -n '__fish_seen_subcommand_from %s; and not __fish_seen_subcommand_from %s' -f -a %q\n",
			parent, strings.Join(t.subs[parent], " "), strings.Join(t.subs[parent], " "))
		for _, sub := range t.subs[parent] {
			for _, f := range t.flags[parent+" "+sub] {
				fmt.Fprintf(w, "complete -c pctl -n '__fish_seen_subcommand_from %s; and __fish_seen_subcommand_from %s' %s\n", parent, sub, fishFlag(f))
			}
		}
	}
	for _, c := range t.top {
		for _, f := range t.flags[c] {
			fmt.Fprintf(w, "complete -c pctl -n '__fish_seen_subcommand_from %s' %s\n", c, fishFlag(f))
		}
	}
}
