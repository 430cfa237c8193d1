package canary

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// adapterName is the finetune each canary tenant uploads Config.Adapter as.
const adapterName = "bulkhead-canary"

// uploadAdapters creates each tenant's canary finetune of the model and
// uploads the adapter to it, returning the finetunes' ids by tenant. A
// finetune of that name left by an earlier run is replaced.
func uploadAdapters(ctx context.Context, cfg Config) ([]string, error) {
	ids := make([]string, len(cfg.Tenants))
	for i, t := range cfg.Tenants {
		if old, err := t.Client.GetFinetune(ctx, adapterName); err == nil {
			if err := t.Client.DeleteFinetune(ctx, old.ID); err != nil {
				return nil, fmt.Errorf("canary: tenant %s: deleting an earlier run's finetune: %w", t.ID, err)
			}
		}
		ft, err := t.Client.CreateFinetune(ctx, adapterName, cfg.Model, "bulkhead canary")
		if err != nil {
			return nil, fmt.Errorf("canary: tenant %s: creating its finetune: %w", t.ID, err)
		}
		if _, err := t.Client.UploadFinetuneAsset(ctx, ft.ID, "adapter.gguf", bytes.NewReader(cfg.Adapter)); err != nil {
			return nil, fmt.Errorf("canary: tenant %s: uploading its adapter: %w", t.ID, err)
		}
		ids[i] = ft.ID
	}
	return ids, nil
}

// deleteAdapters deletes the canary's finetunes, within a bounded time
// even when the run's context has ended.
func deleteAdapters(cfg Config, ids []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, id := range ids {
		_ = cfg.Tenants[i].Client.DeleteFinetune(ctx, id)
	}
}

// withTwins adds, for every third prompt that fits, the same prompt under
// its tenant's finetune (ids by tenant), and returns which prompts are in a
// pair. A twin runs with its original in the load phase; KV computed under
// the adapter and taken without it, or the reverse, changes one of the two
// answers from its quiet reference, which both compute without the prefix
// cache.
func withTwins(ps []prompt, ids []string) ([]prompt, map[int]bool) {
	n := len(ps)
	paired := map[int]bool{}
	for i := range n {
		if p := ps[i]; !p.oversize && i%3 == 0 {
			p.lora, p.twin = ids[p.tenant], i
			paired[i], paired[len(ps)] = true, true
			ps = append(ps, p)
		}
	}
	return ps, paired
}

// checkAdapters counts, per tenant, the twins whose quiet answer under the
// adapter was the base model's: all of them means the adapter was never
// applied.
func (r *run) checkAdapters() {
	for i, p := range r.prompts {
		if p.lora == "" {
			continue
		}
		ref, ok := r.reference(i)
		base, okBase := r.reference(p.twin)
		if !ok || !okBase {
			continue
		}
		r.note(p.tenant, func(t *TenantReport) {
			t.AdapterPairs++
			if ref == base {
				t.AdapterSame++
			}
		}, "")
	}
}
