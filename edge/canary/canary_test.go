package canary_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/canary"
	"github.com/bulkhead-ai/bulkhead/edge/canary/canarytest"
	"github.com/bulkhead-ai/bulkhead/edge/client"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// TestMain fails the run if goroutines outlive the tests.
func TestMain(m *testing.M) { testkit.Main(m) }

// tenants mints n canary tenants' tokens with the planted edge's key.
func tenants(t *testing.T, e *canarytest.Edge, n int) []canary.Tenant {
	t.Helper()
	key, err := auth.LoadOrCreateDevKey(e.KeyDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []canary.Tenant
	for i := range n {
		id := fmt.Sprintf("canary-%d", i)
		tok, err := key.Mint(id, []string{auth.ScopeRun, auth.ScopeRead}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, canary.Tenant{ID: id, Client: client.New(e.URL, tok)})
	}
	return out
}

// TestRunDetectsPlantedLeaks runs the canary against a real edge with one
// planted fault at a time: a worker that returns another tenant's marker, a
// response that differs from its reference, and an over-long prompt that
// gets served (the listing advertises less than the edge admits). Each must
// be counted by its own detector and fail the run; with no fault the run
// passes, so the report is not failing for some other reason.
func TestRunDetectsPlantedLeaks(t *testing.T) {
	// found says which detectors fired for one tenant.
	type found struct{ leak, differ, served bool }
	tests := []struct {
		fault canarytest.Fault
		want  found // every tenant's
	}{
		{canarytest.None, found{}},
		{canarytest.ForeignMarker, found{leak: true}},
		{canarytest.DiffersUnderLoad, found{differ: true}},
		{canarytest.OverlongServed, found{served: true}},
	}
	for _, tc := range tests {
		t.Run(tc.fault.String(), func(t *testing.T) {
			e := canarytest.Start(t, tc.fault)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := canary.Run(ctx, canary.Config{Model: canarytest.Model, Tenants: tenants(t, e, 2),
				Requests: 10, Concurrency: 2, OversizeFraction: 0.2, MaxTokens: 4, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range rep.Tenants {
				if tr.Oversize == 0 || tr.Checked == 0 || tr.Errors > 0 {
					t.Errorf("tenant %s: %d over-long sent, %d checked, %d errors: the run did not exercise every detector cleanly", tr.Tenant, tr.Oversize, tr.Checked, tr.Errors)
				}
				got := found{leak: tr.Leaks > 0, differ: tr.Differ > 0, served: tr.OversizeRefused < tr.Oversize}
				if got != tc.want || (got != found{}) != (len(tr.Problems) > 0) {
					t.Errorf("tenant %s: detected %+v, want %+v: %+v", tr.Tenant, got, tc.want, tr)
				}
			}
			if ok := tc.want == (found{}); rep.OK() != ok {
				t.Fatalf("planted %s: report OK %v, want %v: %+v", tc.fault, rep.OK(), ok, rep.Tenants)
			}
		})
	}
}

func TestReadTenants(t *testing.T) {
	tests := []struct {
		name, file string
		want       []string // tenant ids; nil with wantErr
		wantErr    bool
	}{
		{"lines", "acme tok-a\nglobex tok-b\n", []string{"acme", "globex"}, false},
		{"comments and blank lines", "# canary tenants\n\n  acme   tok-a  \n#globex tok-b\n", []string{"acme"}, false},
		{"a line without a token", "acme tok-a\nglobex\n", nil, true},
		{"a line with three fields", "acme tok-a extra\n", nil, true},
		{"empty", "", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := canary.ReadTenants(strings.NewReader(tc.file), "tokens.txt", "http://edge.test")
			if tc.wantErr {
				if !errors.Is(err, canary.ErrTokenFile) || !strings.Contains(err.Error(), "tokens.txt") {
					t.Fatalf("error %v, want ErrTokenFile naming the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, tn := range ts {
				if tn.Client == nil {
					t.Fatalf("tenant %s has no client", tn.ID)
				}
				ids = append(ids, tn.ID)
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.want) {
				t.Fatalf("tenants %v, want %v", ids, tc.want)
			}
		})
	}
}
