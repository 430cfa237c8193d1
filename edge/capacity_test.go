package edge

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/refdatatest"
	"github.com/bulkhead-ai/bulkhead/models/testkit"
	"github.com/bulkhead-ai/bulkhead/queue"
	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// TestFollowCapacity checks the capacity-following policy over a real
// capacity bucket: the advertised window follows the smallest live worker's,
// rises again when that worker goes, never rises above the catalog's own,
// and a model with a live worker counts as live.
func TestFollowCapacity(t *testing.T) {
	stories := refdatatest.Path(t, "models/stories260K.gguf")
	cat, err := catalog.FromFlags([]string{modelStories + "=" + stories, modelIdle + "=" + stories})
	if err != nil {
		t.Fatal(err)
	}
	_, js := queuetest.JetStream(t, queuetest.Server(t).ClientURL())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A record there before the watch starts is applied before it returns.
	if err := queue.PublishCapacity(ctx, js, modelStories, 512, "small"); err != nil {
		t.Fatal(err)
	}
	own, _ := cat.EffectiveContext(modelIdle)
	live, wait, err := FollowCapacity(ctx, slog.New(slog.DiscardHandler), js, cat)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	advertises := func(model string, want int) func() bool {
		return func() bool { got, _ := cat.EffectiveContext(model); return got == want }
	}
	if !advertises(modelStories, 512)() || !live.Live(modelStories) {
		t.Fatal("the record present at start was not applied before FollowCapacity returned")
	}
	steps := []struct {
		name  string
		do    func() error
		model string
		want  int
	}{
		{"a smaller worker lowers it", func() error { return queue.PublishCapacity(ctx, js, modelStories, 256, "smaller") }, modelStories, 256},
		{"the smaller worker going raises it", func() error { return queue.WithdrawCapacity(ctx, js, modelStories, "smaller") }, modelStories, 512},
		{"a larger worker never lifts it above the catalog's", func() error { return queue.PublishCapacity(ctx, js, modelIdle, own*2, "large") }, modelIdle, own},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			testkit.Poll(t, 5*time.Second, testkit.Cond(s.name, advertises(s.model, s.want)))
		})
	}
	testkit.Poll(t, 5*time.Second, testkit.Cond("the idle model to count as live", func() bool { return live.Live(modelIdle) }))
}
