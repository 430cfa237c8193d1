package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WatchEnded calls fn, in order, with every job record that reaches
// StatusDone or StatusFailed in the results bucket from now on, until ctx
// ends (then it returns nil). The edge gives back an ended async job's
// quota slot this way. A record that does not decode, or sits under another
// id's key, is skipped. fn runs on the watching goroutine: keep it short.
func (c *Client) WatchEnded(ctx context.Context, fn func(*AsyncResult)) error {
	res, err := c.openResults(ctx)
	if err != nil {
		return err
	}
	w, err := res.kv.WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("queue: watching %s: %w", ResultsBucket, err)
	}
	defer stopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("queue: the watch of %s stopped", ResultsBucket)
			}
			if rec := endedRecord(e); rec != nil {
				fn(rec)
			}
		}
	}
}

// endedRecord is the job record e holds if it is one that ended.
func endedRecord(e jetstream.KeyValueEntry) *AsyncResult {
	if e == nil || e.Operation() != jetstream.KeyValuePut || !strings.HasPrefix(e.Key(), "job_") {
		return nil
	}
	var rec AsyncResult
	if err := json.Unmarshal(e.Value(), &rec); err != nil || ResultKey(rec.ID) != e.Key() {
		return nil
	}
	if rec.Status != StatusDone && rec.Status != StatusFailed {
		return nil
	}
	return &rec
}

// stopWatch stops a KV watcher and takes the updates left in its channel
// until the watcher closes it (at most watchDrain): its callback may be
// blocked handing over an update that no one reads any more, and would hold
// its goroutine forever.
func stopWatch(w jetstream.KeyWatcher) {
	_ = w.Stop()
	timeout := time.NewTimer(watchDrain)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if !ok {
				return
			}
		case <-timeout.C:
			return
		}
	}
}

// watchDrain bounds how long stopWatch waits for a watcher to close.
const watchDrain = 5 * time.Second
