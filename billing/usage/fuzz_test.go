package usage

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/billing/ledger"
)

// FuzzQuery: any query string either yields a usable range (From before To,
// hour or day) for the caller's tenant, or a QueryError; never a panic.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"", "granularity=hour", "granularity=day&from=2026-11-01&to=2026-12-01",
		"from=2026-12-01T10:00:00Z&to=2026-12-01T09:00:00Z", "from=yesterday", "granularity=week",
		"from=2026-12-01T10:00:00%2B02:00", "model=@cf/meta/x&tenant=other",
	} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	h := &Handler{cfg: Config{Now: func() time.Time { return now }}}
	f.Fuzz(func(t *testing.T, raw string) {
		if _, err := url.ParseQuery(raw); err != nil {
			return
		}
		r := httptest.NewRequest(http.MethodGet, "/ai/usage", nil)
		r.URL.RawQuery = raw
		q, err := h.query(r, "acme")
		if err != nil {
			var qe *QueryError
			if !errors.As(err, &qe) || !errors.Is(err, ledger.ErrQuery) {
				t.Fatalf("error %v is not a QueryError", err)
			}
			return
		}
		if q.Tenant != "acme" || !q.To.After(q.From) || (q.Granularity != ledger.Hour && q.Granularity != ledger.Day) {
			t.Fatalf("query %+v from %q", q, raw)
		}
	})
}

// TestCSVText: text cells a spreadsheet would run as formulas are written
// as text; others are left alone.
func TestCSVText(t *testing.T) {
	for in, want := range map[string]string{
		"@cf/meta/llama-3.2-1b-instruct": "'@cf/meta/llama-3.2-1b-instruct",
		"=HYPERLINK(\"x\")":              "'=HYPERLINK(\"x\")",
		"+1":                             "'+1",
		"-1+2":                           "'-1+2",
		"\tx":                            "'\tx",
		"\rx":                            "'\rx",
		"model":                          "model",
		"":                               "",
	} {
		if got := CSVText(in); got != want {
			t.Errorf("CSVText(%q) = %q, want %q", in, got, want)
		}
	}
}
