package conformance

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText writes the report for humans: a table of CHECK, STATUS and REASON, one line per
// check, then a summary line such as
//
//	PASS: kafka-murmur2 sha256:6f0c2a1e9b3d (8 checks)
//	PASS: my-plugin sha256:0123456789ab (8 checks; warnings: limits)
//	FAIL: rand-clock sha256:9d2c0b7e1a44 (failed: determinism; 8 checks)
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tREASON")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", res.Name, strings.ToUpper(string(res.Status)), oneLine(res.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, r.Summary())
	return err
}

// Summary is the report's last line: "PASS: NAME sha256:DIGEST12 (N checks...)" or "FAIL: ...".
func (r *Report) Summary() string {
	name := r.Module.Name
	if name == "" {
		name = r.Module.Source
	}
	if name == "" {
		name = "module"
	}
	digest := r.Module.Digest
	if len(digest) > 12 {
		digest = digest[:12]
	}
	var warned []string
	for _, res := range r.Results {
		if res.Status == StatusWarn {
			warned = append(warned, res.Name)
		}
	}
	if !r.Passed {
		return fmt.Sprintf("FAIL: %s sha256:%s (failed: %s; %d checks)", name, digest, strings.Join(r.Failed(), ", "), len(r.Results))
	}
	if len(warned) > 0 {
		return fmt.Sprintf("PASS: %s sha256:%s (%d checks; warnings: %s)", name, digest, len(r.Results), strings.Join(warned, ", "))
	}
	return fmt.Sprintf("PASS: %s sha256:%s (%d checks)", name, digest, len(r.Results))
}

// WriteJSON writes the report as one indented JSON object (schema in spec/conformance.md).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
