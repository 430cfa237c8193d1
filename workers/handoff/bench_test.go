package handoff

import (
	"context"
	"testing"

	"github.com/bulkhead-ai/bulkhead/queue/queuetest"
)

// BenchmarkTransfer moves 32 full smollm2-135m pages (512 prompt tokens) from
// a Sender to Fetch over a loopback NATS server, each side on its own
// connection, with the default window and chunk size. Fetch's CRC-64 check of
// every page is counted.
func BenchmarkTransfer(b *testing.B) {
	url := queuetest.Server(b).ClientURL()
	snc, rnc := queuetest.Conn(b, url), queuetest.Conn(b, url)
	fx := newFixture(b, 30, smolLayout, 32*smolLayout.PageSize)
	total := 0
	for _, p := range fx.pages {
		total += len(p)
	}
	b.SetBytes(int64(total))
	sink := func(int, []byte) error { return nil }
	ctx := context.Background()
	base := fx.manifest(b) // NewManifest's CRC-64 pass is not counted
	for b.Loop() {
		m := *base
		m.TransferID = NewTransferID()
		s, err := NewSender(snc, &m, fx.pages, SenderConfig{})
		if err != nil {
			b.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx) }()
		if err := Fetch(ctx, rnc, &m, ReceiverConfig{}, sink); err != nil {
			b.Fatal(err)
		}
		if err := <-served; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(fx.pages)*b.N)/b.Elapsed().Seconds(), "pages/s")
}

// BenchmarkPageChecksum is the CRC-64 of one full smollm2-135m page, paid once
// by NewManifest and once by Fetch per page.
func BenchmarkPageChecksum(b *testing.B) {
	fx := newFixture(b, 31, smolLayout, smolLayout.PageSize)
	b.SetBytes(int64(len(fx.pages[0])))
	for b.Loop() {
		PageChecksum(fx.pages[0])
	}
}
