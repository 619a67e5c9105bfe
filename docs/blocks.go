package docs

import (
	"fmt"
	"regexp"
	"strings"
)

// Block is one fenced code block of a Markdown page.
type Block struct {
	File string // the page, relative to the repository root
	Line int    // line of the opening fence, 1-based
	Lang string // the fence's info string, first word ("sh", "js", ...), "" for none
	Code string
	// NotRun is the reason given by a `<!-- not run: REASON -->` comment on the line before the
	// fence; "" for a block that runs.
	NotRun string
}

// Runner says how a block of a language runs: "sh" (the page's shell session), "node",
// "python" or "jshell"; "" for blocks that are not programs (output, configuration, XML...).
func (b Block) Runner() string {
	switch b.Lang {
	case "sh", "bash", "shell":
		return "sh"
	case "js", "javascript", "mjs":
		return "node"
	case "python", "py":
		return "python"
	case "java":
		return "jshell"
	}
	return ""
}

func (b Block) String() string { return fmt.Sprintf("%s:%d (```%s)", b.File, b.Line, b.Lang) }

var (
	fenceRE  = regexp.MustCompile("^( {0,3})(```+|~~~+)\\s*([^\\s`]*)")
	notRunRE = regexp.MustCompile(`^<!--\s*not run\s*(?::\s*(.*?))?\s*-->$`)
	// commandRE recognises a line that a reader would type: such a line belongs in a fenced
	// block with a language, where it runs.
	commandRE = regexp.MustCompile(`^(\$ )?(pctl|\./pctl|\./[\w./-]+\.sh|go (run|build|test)|sdk/\w+/|node |npm |python3? |java |mvn |cd |export )`)
)

// ParseBlocks returns a page's fenced code blocks and what breaks the page's conventions: a
// "not run" comment without a reason, a block that looks like commands but has no language, and
// an indented code block of commands (neither would ever run).
func ParseBlocks(file, text string) (blocks []Block, problems []string) {
	lines := strings.Split(text, "\n")
	prevNonBlank := ""
	prevBlank := true
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		m := fenceRE.FindStringSubmatch(line)
		if m == nil {
			if prevBlank && strings.HasPrefix(line, "    ") && commandRE.MatchString(strings.TrimSpace(line)) && !inList(lines, i) {
				problems = append(problems, fmt.Sprintf("%s:%d: an indented code block of commands never runs: put it in a ```sh block (or a ```text block for output)", file, i+1))
			}
			if strings.TrimSpace(line) != "" {
				prevNonBlank = strings.TrimSpace(line)
			}
			prevBlank = strings.TrimSpace(line) == ""
			continue
		}
		indent, fence, lang := m[1], m[2], strings.ToLower(m[3])
		b := Block{File: file, Line: i + 1, Lang: lang}
		if nm := notRunRE.FindStringSubmatch(prevNonBlank); nm != nil {
			b.NotRun = nm[1]
			if b.NotRun == "" {
				problems = append(problems, fmt.Sprintf("%s:%d: say why the block does not run: <!-- not run: REASON -->", file, i+1))
				b.NotRun = "(no reason given)"
			}
		}
		var code []string
		j := i + 1
		for ; j < len(lines); j++ {
			if strings.HasPrefix(strings.TrimLeft(lines[j], " "), fence[:3]) && strings.TrimSpace(strings.Trim(strings.TrimSpace(lines[j]), fence[:1])) == "" {
				break
			}
			code = append(code, strings.TrimPrefix(lines[j], indent))
		}
		if j == len(lines) {
			problems = append(problems, fmt.Sprintf("%s:%d: the code block is never closed", file, i+1))
		}
		b.Code = strings.Join(code, "\n") + "\n"
		if b.Lang == "" && len(code) > 0 && commandRE.MatchString(strings.TrimSpace(code[0])) {
			problems = append(problems, fmt.Sprintf("%s:%d: a block of commands without a language never runs: write ```sh (or ```text for output)", file, i+1))
		}
		blocks = append(blocks, b)
		i = j
		prevNonBlank = ""
		prevBlank = true
	}
	return blocks, problems
}

// inList reports whether line i continues a list item (an indented paragraph, not code).
func inList(lines []string, i int) bool {
	for k := i - 1; k >= 0; k-- {
		l := lines[k]
		if strings.TrimSpace(l) == "" {
			continue
		}
		if strings.HasPrefix(l, "    ") {
			continue
		}
		t := strings.TrimSpace(l)
		return strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") || regexp.MustCompile(`^\d+\. `).MatchString(t)
	}
	return false
}

// backgroundRE matches a shell line that starts a server in the background: "CMD &", maybe
// followed by a comment. Not "&&", not a line that redirects the output itself.
var (
	backgroundRE = regexp.MustCompile(`^(\s*[^#\s].*?[^&\s])\s*&(\s+#.*)?\s*$`)
	quotedRE     = regexp.MustCompile(`'[^']*'|"(\\.|[^"\\])*"`)
	natsServerRE = regexp.MustCompile(`(^|[\s/])(pctl nats-server|nats-server) `)
)

// WithReadyWaits returns a shell block with every background line ("pctl serve ... &") made to
// wait, before the next line runs, until the process printed its first line on standard output
// (pctl serve prints one line when it is ready; for nats-server, its "Server is ready" log line)
// or failed: what a person does who waits for the ready line before typing on. The block is otherwise unchanged. n numbers the waits of a page.
func WithReadyWaits(code string, n *int) string {
	var out []string
	for _, line := range strings.Split(code, "\n") {
		m := backgroundRE.FindStringSubmatch(line)
		if m == nil || strings.ContainsAny(quotedRE.ReplaceAllString(m[1], ""), "><") {
			out = append(out, line)
			continue
		}
		*n++
		f := fmt.Sprintf(`"$__doc_dir/bg-%d"`, *n)
		mode := ""
		if natsServerRE.MatchString(m[1]) {
			mode = " nats-server"
		}
		out = append(out, fmt.Sprintf(`%s > %s.out 2> %s.err & __doc_wait_ready $! %s%s`, m[1], f, f, f, mode))
	}
	return strings.Join(out, "\n")
}
