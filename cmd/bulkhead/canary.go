package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/edge/canary"
	"github.com/bulkhead-ai/bulkhead/edge/client"
)

// errCanaryFailed makes the exit status non-zero when a run finds a problem.
var errCanaryFailed = errors.New("canary found problems")

func runCanary(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("canary", stderr)
	edgeURL := fs.String("edge", "http://127.0.0.1:8787", "edge base URL")
	model := fs.String("model", "", "model to call (default: the first the canary tenant may use)")
	tenants := fs.Int("tenants", 8, "canary tenants (with --key-dir: minted as canary-0, canary-1, ...)")
	requests := fs.Int("requests", 400, "requests in the load phase, all tenants together")
	concurrency := fs.Int("concurrency", 8, "requests in flight in the load phase")
	oversize := fs.Float64("oversize-fraction", 0.2, "share of prompts longer than the context window (must be refused)")
	maxTokens := fs.Int("max-tokens", 24, "tokens generated per request")
	seed := fs.Uint64("seed", 1, "seed for the prompts")
	keyDir := fs.String("key-dir", "", "mint tenant tokens with the dev key in this directory")
	tokens := fs.String("tokens", "", "file of `tenant token` lines, one per canary tenant (for production edges)")
	timeout := fs.Duration("timeout", 30*time.Minute, "give up after this long")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	loraFile := fs.String("lora", "", "a LoRA adapter (GGUF) for the model: each tenant uploads it as a finetune, and a third of the prompts also run under it (tokens need finetunes:write)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var adapter []byte
	if *loraFile != "" {
		b, err := os.ReadFile(*loraFile)
		if err != nil {
			return fmt.Errorf("--lora: %w", err)
		}
		adapter = b
	}
	ts, err := canaryTenants(*edgeURL, *keyDir, *tokens, *tenants, adapter != nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *model == "" {
		models, err := ts[0].Client.Models(ctx)
		if err != nil {
			return err
		}
		if len(models) == 0 {
			return fmt.Errorf("the edge serves no model to tenant %s", ts[0].ID)
		}
		*model = models[0].ID
	}
	rep, err := canary.Run(ctx, canary.Config{
		Model: *model, Tenants: ts, Requests: *requests, Concurrency: *concurrency,
		OversizeFraction: *oversize, MaxTokens: *maxTokens, Seed: *seed, Adapter: adapter,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(rep); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "canary: model %s, context window %d\n", rep.Model, rep.ContextWindow)
		fmt.Fprintf(stdout, "%-12s %8s %7s %9s %8s %8s %7s %8s\n", "tenant", "checked", "differ", "oversize", "refused", "foreign", "errors", "adapter")
		for _, t := range rep.Tenants {
			fmt.Fprintf(stdout, "%-12s %8d %7d %9d %8d %8d %7d %4d/%-3d\n", t.Tenant, t.Checked, t.Differ, t.Oversize, t.OversizeRefused, t.Leaks, t.Errors, t.AdapterPairs-t.AdapterSame, t.AdapterPairs)
			for _, p := range t.Problems {
				fmt.Fprintf(stdout, "  ! %s\n", p)
			}
		}
	}
	if !rep.OK() {
		return errCanaryFailed
	}
	return nil
}

// canaryTenants builds the tenants' clients from minted or given tokens.
func canaryTenants(edgeURL, keyDir, tokenFile string, n int, finetunes bool) ([]canary.Tenant, error) {
	switch {
	case keyDir != "" && tokenFile != "":
		return nil, fmt.Errorf("%w: give --key-dir or --tokens, not both", errUsage)
	case keyDir != "":
		return mintTenants(edgeURL, keyDir, n, finetunes)
	case tokenFile != "":
		ts, err := canary.LoadTenants(tokenFile, edgeURL)
		if errors.Is(err, canary.ErrTokenFile) {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		return ts, err
	}
	return nil, fmt.Errorf("%w: give --key-dir (dev) or --tokens FILE", errUsage)
}

// mintTenants mints n canary tenants' tokens (canary-0, canary-1, ...)
// with the dev key in keyDir, with the finetunes:write scope if finetunes.
func mintTenants(edgeURL, keyDir string, n int, finetunes bool) ([]canary.Tenant, error) {
	key, err := auth.LoadOrCreateDevKey(keyDir)
	if err != nil {
		return nil, err
	}
	var out []canary.Tenant
	for i := range n {
		id := fmt.Sprintf("canary-%d", i)
		scopes := []string{auth.ScopeRun, auth.ScopeRead}
		if finetunes {
			scopes = append(scopes, auth.ScopeFinetunesWrite)
		}
		tok, err := key.Mint(id, scopes, nil, time.Hour)
		if err != nil {
			return nil, err
		}
		out = append(out, canary.Tenant{ID: id, Client: client.New(edgeURL, tok)})
	}
	return out, nil
}
