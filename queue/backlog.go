package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TenantBacklog is one tenant's jobs for a model in the jobs stream, for
// operators (bulkhead status): how many, and how long the oldest has been
// there.
type TenantBacklog struct {
	Tenant string    `json:"tenant"` // the tenant's subject token (TenantToken)
	Jobs   int       `json:"jobs"`   // waiting or running, its shared and routed queues together
	Oldest time.Time `json:"oldest"` // when the oldest of them was queued
}

// Backlog lists the tenants with jobs of model in the jobs stream, those
// with the most first, at most most of them. The legacy subject's jobs are
// not listed (they have no tenant in their subject).
func Backlog(ctx context.Context, js jetstream.JetStream, model string, most int) ([]TenantBacklog, error) {
	st, err := js.Stream(ctx, JobsStream)
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	prefix := JobSubject(model) + "."
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("queue: stream %s: %w", JobsStream, err)
	}
	byTenant := map[string]*TenantBacklog{}
	subjects := map[string][]string{}
	for subj, n := range info.State.Subjects {
		tok, _ := SplitRoute(strings.TrimPrefix(subj, prefix))
		b := byTenant[tok]
		if b == nil {
			b = &TenantBacklog{Tenant: tok}
			byTenant[tok] = b
		}
		b.Jobs += int(n)
		subjects[tok] = append(subjects[tok], subj)
	}
	out := make([]TenantBacklog, 0, len(byTenant))
	for _, b := range byTenant {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b TenantBacklog) int {
		return cmp.Or(cmp.Compare(b.Jobs, a.Jobs), cmp.Compare(a.Tenant, b.Tenant))
	})
	out = out[:min(len(out), most)]
	for i := range out {
		for _, subj := range subjects[out[i].Tenant] {
			msg, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subj))
			if err != nil {
				continue // taken meanwhile
			}
			if out[i].Oldest.IsZero() || msg.Time.Before(out[i].Oldest) {
				out[i].Oldest = msg.Time
			}
		}
	}
	return out, nil
}
