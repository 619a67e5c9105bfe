package clientconf

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the report as a table: one row per scenario, PASS or FAIL, the numbers and
// the reasons of a failure, then the verdict.
func (r *Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "client conformance (spec/client-conformance.md), seed %d\n  producer: %s\n  consumer: %s\n\n", r.Seed, r.Producer, r.Consumer)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tRESULT\tSENT\tACKED\tDELIVERED\tDUPS\tEPOCHS\tTIME\tDETAIL")
	for _, s := range r.Scenarios {
		res := "PASS"
		detail := s.Description
		if !s.Passed {
			res = "FAIL"
			detail = strings.Join(s.Failures, " || ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1fs\t%s\n", s.Name, res, s.Sent, s.Acked, s.Delivered, s.Duplicates, s.Epochs, float64(s.DurationMS)/1000, detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	failed := 0
	for _, s := range r.Scenarios {
		if !s.Passed {
			failed++
		}
	}
	verdict := "PASS"
	if !r.Passed {
		verdict = fmt.Sprintf("FAIL (%d of %d scenarios)", failed, len(r.Scenarios))
	}
	_, err := fmt.Fprintf(w, "\n%s\n", verdict)
	return err
}

// WriteJSON prints the report as one JSON document (spec/client-conformance.md §5).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
