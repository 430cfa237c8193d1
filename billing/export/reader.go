package export

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Sink takes a batch of exported events, each a CloudEvent's JSON, and
// returns nil only once it holds them all.
type Sink interface {
	Take(ctx context.Context, events [][]byte) error
}

// Lines writes each event on a line of its own (JSON Lines).
type Lines struct{ W io.Writer }

// Take writes the batch.
func (l Lines) Take(_ context.Context, events [][]byte) error {
	var b bytes.Buffer
	for _, e := range events {
		b.Write(e)
		b.WriteByte('\n')
	}
	_, err := l.W.Write(b.Bytes())
	return err
}

// BatchContentType is CloudEvents' batched JSON content type: a JSON array
// of events in structured mode.
const BatchContentType = "application/cloudevents-batch+json"

// Post sends each batch as one HTTP POST of a JSON array of CloudEvents
// (BatchContentType), e.g. to OpenMeter's /api/v1/events. Any 2xx answer
// means the endpoint took the batch.
type Post struct {
	URL    string
	Header http.Header  // e.g. Authorization
	Client *http.Client // default: a client with a 30 s timeout
}

// Take posts the batch.
func (p Post) Take(ctx context.Context, events [][]byte) error {
	body := append([]byte{'['}, bytes.Join(events, []byte{','})...)
	body = append(body, ']')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range p.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", BatchContentType)
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("export: %s answered %s: %s", p.URL, resp.Status, bytes.TrimSpace(head))
	}
	return nil
}

// Reader reads the export stream with one durable consumer
// (queue.ExportConsumer) and hands the events to a sink in batches,
// acknowledging a batch only once the sink took it.
type Reader struct {
	Consumer jetstream.Consumer
	Sink     Sink
	Log      *slog.Logger
	Batch    int           // events a batch at most; default 100
	Wait     time.Duration // how long a fetch waits for a first event; default 1s
	Retry    time.Duration // the first pause after the sink failed, doubling up to a minute; default 1s
}

// Run forwards events until ctx ends (then it returns nil) or the stream
// cannot be read. A batch the sink refuses is offered again, the same
// events in the same order, until it takes it.
func (r *Reader) Run(ctx context.Context) error {
	batch, wait, retry := r.Batch, r.Wait, r.Retry
	if batch <= 0 {
		batch = 100
	}
	if wait <= 0 {
		wait = time.Second
	}
	if retry <= 0 {
		retry = time.Second
	}
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for ctx.Err() == nil {
		msgs, err := r.Consumer.Fetch(batch, jetstream.FetchMaxWait(wait))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("export: fetching: %w", err)
		}
		var held []jetstream.Msg
		var events [][]byte
		for m := range msgs.Messages() {
			held = append(held, m)
			events = append(events, m.Data())
		}
		if err := msgs.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && len(held) == 0 {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("export: fetching", "err", err)
			continue
		}
		if len(held) == 0 {
			continue
		}
		if !r.deliver(ctx, log, held, events, retry) {
			return nil
		}
	}
	return nil
}

// deliver offers one batch to the sink until it takes it, keeping the
// messages from being redelivered meanwhile, then acknowledges them. It
// reports false when ctx ended first (the batch is then redelivered to the
// consumer's next reader).
func (r *Reader) deliver(ctx context.Context, log *slog.Logger, held []jetstream.Msg, events [][]byte, pause time.Duration) bool {
	for {
		err := r.Sink.Take(ctx, events)
		if err == nil {
			break
		}
		log.Warn("export: the sink refused a batch; offering it again", "events", len(events), "err", err, "in", pause)
		for _, m := range held {
			_ = m.InProgress()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Minute)
	}
	for _, m := range held {
		if err := m.Ack(); err != nil {
			log.Warn("export: acknowledging", "err", err)
		}
	}
	return true
}
