package statuspage

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// missing is what pageEval's script returns when no element matches (a string no page shows).
const missing = "\x00no such element"

// pageText returns the visible text of the first element that matches sel. The element is found
// and read in one evaluation in the page: looking a node up first and reading it after
// (chromedp.Text) fails with "No node with given id found" when the page re-renders in between,
// as it does on every update (seen in CI, 2026-12-02). It waits up to 10 s for such an element.
func pageText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return pageEval(t, ctx, sel, `e.innerText`)
}

// pageAttr returns the attribute name of the first element that matches sel ("" when the element
// has no such attribute), found and read in one evaluation as pageText's.
func pageAttr(t *testing.T, ctx context.Context, sel, name string) string {
	t.Helper()
	return pageEval(t, ctx, sel, `(e.getAttribute(`+jsString(name)+`) ?? "")`)
}

func pageEval(t *testing.T, ctx context.Context, sel, expr string) string {
	t.Helper()
	js := `(() => { const e = document.querySelector(` + jsString(sel) + `); return e === null ? ` + jsString(missing) + ` : String(` + expr + `); })()`
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err == nil && v != missing {
			return strings.TrimSpace(v)
		}
		if time.Now().After(deadline) {
			if err == nil {
				t.Fatalf("%s: no element matches after 10 s", sel)
			}
			t.Fatalf("%s: %v", sel, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
