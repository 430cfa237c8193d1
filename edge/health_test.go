package edge

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHealth: /healthz answers while the process lives; /readyz only while
// every check passes and the node is not draining, naming each check.
func TestHealth(t *testing.T) {
	h := NewHealth()
	mux := http.NewServeMux()
	OpsRoutes(mux, h, prometheus.NewRegistry())
	get := func(path string) (int, map[string]bool) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		var a struct {
			Checks []struct {
				Name string `json:"name"`
				OK   bool   `json:"ok"`
			} `json:"checks"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		checks := map[string]bool{}
		for _, c := range a.Checks {
			checks[c.Name] = c.OK
		}
		return rec.Code, checks
	}
	var fail error
	h.Add("store", func(context.Context) error { return fail })
	if code, checks := get("/readyz"); code != 200 || !checks["store"] || !checks["not_draining"] {
		t.Fatalf("ready: %d %v", code, checks)
	}
	fail = errors.New("down")
	if code, checks := get("/readyz"); code != 503 || checks["store"] {
		t.Fatalf("a failing check: %d %v", code, checks)
	}
	fail = nil
	h.Drain()
	if code, checks := get("/readyz"); code != 503 || checks["not_draining"] {
		t.Fatalf("draining: %d %v", code, checks)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz while draining: %d", code)
	}
}
