package queue

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

// authEnv is an embedded server that takes only role credentials, set up by
// the operator.
type authEnv struct {
	srv  *Server
	auth *Auth
}

func startAuthEnv(t *testing.T, cfg StreamConfig) *authEnv {
	t.Helper()
	a, err := NewAuth()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := StartServer(ServerConfig{Port: -1, StoreDir: t.TempDir(), Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	env := &authEnv{srv: srv, auth: a}
	_, js := env.conn(t, RoleSetup)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Setup(ctx, js, cfg); err != nil {
		t.Fatalf("setup role's Setup: %v", err)
	}
	return env
}

// conn connects as role; violations the server reports are sent to errs.
func (e *authEnv) conn(t *testing.T, role string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(e.srv.ClientURL(), e.auth.Credentials(role).Options()...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestRolesCarryAJob runs a job end to end with each node on its own role's
// credentials: the operator set up, the worker consumes, claims, streams and
// publishes capacity and usage, the edge submits, reads frames, follows
// capacity, cancels and reads an async record; billing consumes the usage.
// Every permission a role needs is in RolePermissions.
func TestRolesCarryAJob(t *testing.T) {
	env := startAuthEnv(t, StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	enc, ejs := env.conn(t, RoleEdge)
	wnc, wjs := env.conn(t, RoleWorker)
	_, bjs := env.conn(t, RoleBilling)
	for role, js := range map[string]jetstream.JetStream{RoleEdge: ejs, RoleWorker: wjs, RoleBilling: bjs} {
		if err := Ensure(ctx, js, StreamConfig{}); err != nil {
			t.Fatalf("Ensure as %s: %v", role, err)
		}
	}
	const model = "@cf/test/model"
	if err := PublishCapacity(ctx, wjs, model, 512, "w1"); err != nil {
		t.Fatalf("worker publishes capacity: %v", err)
	}
	live := NewLiveModels(0)
	w, err := WatchCapacity(ctx, ejs, live.Set)
	if err != nil {
		t.Fatalf("edge watches capacity: %v", err)
	}
	_ = w
	if !live.Live(model) {
		t.Fatal("the edge does not see the worker's capacity")
	}
	c := NewClient(enc, ejs).WithLiveness(live)
	// The edge follows job records to their end (WatchEnded).
	ended := make(chan *AsyncResult, 4)
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() { watchDone <- c.WatchEnded(wctx, func(r *AsyncResult) { ended <- r }) }()
	defer func() { stopWatch(); <-watchDone }()
	// It reports records written from now on: wait for its consumer.
	testkit.Poll(t, 10*time.Second, testkit.Cond("the edge's watch of job records", func() bool {
		s, err := ejs.Stream(ctx, "KV_"+ResultsBucket)
		return err == nil && s.CachedInfo().State.Consumers > 0
	}))
	job := testJob("roles-1")
	replies, err := c.Submit(ctx, job)
	if err != nil {
		t.Fatalf("edge submits: %v", err)
	}
	defer replies.Close()
	cons, err := EnsureConsumer(ctx, wjs, model, ConsumerConfig{})
	if err != nil {
		t.Fatalf("worker creates its consumer: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("worker fetches: %v", err)
	}
	got, err := DecodeJob(msg.Data())
	if err != nil || got.Tenant != job.Tenant {
		t.Fatalf("worker decodes %+v, %v", got, err)
	}
	res, err := OpenResults(ctx, wjs)
	if err != nil {
		t.Fatal(err)
	}
	rp, claim, err := res.Claim(ctx, wnc, got)
	if err != nil || claim != ClaimRun {
		t.Fatalf("worker claims: %v %v", claim, err)
	}
	if err := rp.Heartbeat(); err != nil {
		t.Fatal(err)
	}
	if err := rp.Token(ctx, "Hi", []int32{1}); err != nil {
		t.Fatalf("worker streams: %v", err)
	}
	if err := PublishUsage(ctx, wjs, &UsageEvent{Tenant: job.Tenant, Model: model, RequestID: job.ID, Finish: OutcomeStop,
		Time: time.Now(), WorkerID: "w1", PromptTokens: 1, CompletionTokens: 1}); err != nil {
		t.Fatalf("worker publishes usage: %v", err)
	}
	if err := rp.Final(ctx, "", "stop", Usage{PromptTokens: 1, CompletionTokens: 1}); err != nil {
		t.Fatalf("worker ends: %v", err)
	}
	if err := msg.Ack(); err != nil {
		t.Fatal(err)
	}
	frames, err := readAll(t, replies)
	if !errors.Is(err, io.EOF) || len(frames) != 2 {
		t.Fatalf("edge read %d frames, %v", len(frames), err)
	}
	select {
	case r := <-ended:
		if r.ID != job.ID || r.Status != StatusDone || r.Tenant != job.Tenant {
			t.Fatalf("edge saw %+v end, want %s done", r, job.ID)
		}
	case err := <-watchDone:
		t.Fatalf("edge's watch of job records ended: %v", err)
	case <-ctx.Done():
		t.Fatal("the edge did not see the job end")
	}
	if err := c.Cancel(ctx, "roles-1"); err != nil {
		t.Fatalf("edge cancels: %v", err)
	}
	async := testJob("roles-async")
	async.Reply = ""
	if err := c.SubmitAsync(ctx, async); err != nil {
		t.Fatalf("edge submits async: %v", err)
	}
	if rec, err := c.AsyncStatus(ctx, async.ID); err != nil || rec.Status != StatusQueued {
		t.Fatalf("edge polls: %+v %v", rec, err)
	}
	ucons, err := EnsureUsageConsumer(ctx, bjs, UsageConsumerConfig{})
	if err != nil {
		t.Fatalf("billing creates its consumer: %v", err)
	}
	umsg, err := ucons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("billing fetches: %v", err)
	}
	if ev, err := DecodeUsage(umsg.Data()); err != nil || ev.RequestID != job.ID {
		t.Fatalf("billing decodes %+v, %v", ev, err)
	}
	if err := umsg.Ack(); err != nil {
		t.Fatal(err)
	}
	// Billing publishes the counted event on the export stream; the export
	// role reads it there with its own durable consumer, twice over.
	if err := PublishExport(ctx, bjs, job.Tenant, job.ID, []byte(`{"id":"roles-1"}`)); err != nil {
		t.Fatalf("billing exports: %v", err)
	}
	_, xjs := env.conn(t, RoleExport)
	for _, reader := range []string{"openmeter", "lago"} {
		xcons, err := ExportConsumer(ctx, xjs, reader, "", false, 30*time.Second)
		if err != nil {
			t.Fatalf("export role creates consumer %s: %v", reader, err)
		}
		xmsg, err := xcons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("export role fetches: %v", err)
		}
		if string(xmsg.Data()) != `{"id":"roles-1"}` || xmsg.Headers().Get("Content-Type") != ExportContentType {
			t.Fatalf("export role read %q %v", xmsg.Data(), xmsg.Headers())
		}
		if err := xmsg.Ack(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRolesAreRefused: no credentials, a forged key and every role's
// credentials used beyond its permissions are refused by the server.
func TestRolesAreRefused(t *testing.T) {
	env := startAuthEnv(t, StreamConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("no credentials", func(t *testing.T) {
		nc, err := nats.Connect(env.srv.ClientURL(), nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Fatal("connected without credentials")
		}
	})
	t.Run("unknown nkey", func(t *testing.T) {
		forged, err := NewCredentials(RoleEdge)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(env.srv.ClientURL(), append(forged.Options(), nats.MaxReconnects(0))...)
		if err == nil {
			nc.Close()
			t.Fatal("connected with a key the server does not list")
		}
	})

	const model = "@cf/test/model"
	refusedSub := func(t *testing.T, role, subject string) {
		t.Helper()
		errs := make(chan error, 4)
		nc, err := nats.Connect(env.srv.ClientURL(), append(env.auth.Credentials(role).Options(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.SubscribeSync(subject); err != nil {
			return // refused locally: fine
		}
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("%s subscribing to %s: %v, want a permissions violation", role, subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s may subscribe to %s", role, subject)
		}
	}
	for _, tc := range []struct{ role, subject string }{
		{RoleWorker, ReplyPrefix + ">"},
		{RoleWorker, ReplySubject("victim")},
		{RoleBilling, ReplyPrefix + ">"},
		{RoleOperator, ReplyPrefix + ">"},
		{RoleEdge, JobsPrefix + ">"},
		{RoleBilling, JobsPrefix + ">"},
		{RoleEdge, "_INBOX.>"},
		{RoleBilling, ">"},
		{RoleExport, ">"},
		{RoleExport, ReplyPrefix + ">"},
		{RoleExport, ExportPrefix + ">"},
		{RoleEdge, InboxPrefix(env.auth.Credentials(RoleWorker).PublicKey()) + ".>"},
	} {
		t.Run(tc.role+" subscribes to "+tc.subject, func(t *testing.T) { refusedSub(t, tc.role, tc.subject) })
	}

	// A job forged with a worker's (or billing's, or the operator's)
	// credentials is never stored, so never runs.
	for _, role := range []string{RoleWorker, RoleBilling, RoleOperator} {
		t.Run(role+" publishes a job", func(t *testing.T) {
			_, js := env.conn(t, role)
			forged := testJob("forged-" + role)
			forged.Tenant = "victim"
			b, err := EncodeJob(forged)
			if err != nil {
				t.Fatal(err)
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			defer pcancel()
			if _, err := js.Publish(pctx, JobSubject(model), b); err == nil {
				t.Fatal("the jobs stream took a job published by " + role)
			}
		})
	}
	t.Run("edge publishes a hand-over", func(t *testing.T) {
		_, js := env.conn(t, RoleEdge)
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		defer pcancel()
		if err := PublishHandover(pctx, js, &Handover{Job: *testJob("forged-h"), Manifest: []byte(`{}`)}); err == nil {
			t.Fatal("the decode stream took a hand-over published by the edge")
		}
	})
	t.Run("the forged jobs never reach a worker", func(t *testing.T) {
		_, wjs := env.conn(t, RoleWorker)
		st, err := wjs.Stream(ctx, JobsStream)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != 0 {
			t.Fatalf("the jobs stream holds %d forged jobs", n)
		}
	})
	// An edge may not consume jobs, billing may not consume hand-overs, a
	// worker may not consume usage; nobody but the operator creates streams.
	for _, tc := range []struct {
		name string
		role string
		try  func(ctx context.Context, js jetstream.JetStream) error
	}{
		{"edge consumes jobs", RoleEdge, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := EnsureConsumer(ctx, js, model, ConsumerConfig{})
			return err
		}},
		{"billing consumes hand-overs", RoleBilling, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := EnsureDecodeConsumer(ctx, js, model, ConsumerConfig{})
			return err
		}},
		{"worker consumes usage", RoleWorker, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := EnsureUsageConsumer(ctx, js, UsageConsumerConfig{})
			return err
		}},
		{"export consumes usage", RoleExport, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := EnsureUsageConsumer(ctx, js, UsageConsumerConfig{})
			return err
		}},
		{"export consumes jobs", RoleExport, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := EnsureConsumer(ctx, js, model, ConsumerConfig{})
			return err
		}},
		{"export publishes an export", RoleExport, func(ctx context.Context, js jetstream.JetStream) error {
			return PublishExport(ctx, js, "victim", "forged-x", []byte(`{}`))
		}},
		{"worker publishes an export", RoleWorker, func(ctx context.Context, js jetstream.JetStream) error {
			return PublishExport(ctx, js, "victim", "forged-w", []byte(`{}`))
		}},
		{"edge publishes an export", RoleEdge, func(ctx context.Context, js jetstream.JetStream) error {
			return PublishExport(ctx, js, "victim", "forged-e", []byte(`{}`))
		}},
		{"operator reads the export", RoleOperator, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := ExportConsumer(ctx, js, "snoop", "", false, time.Second)
			return err
		}},
		{"edge reads a stored job by sequence", RoleEdge, func(ctx context.Context, js jetstream.JetStream) error {
			nc, _ := env.conn(t, RoleEdge)
			r, err := NewClient(nc, js).Submit(ctx, testJob("stored-1"))
			if err != nil {
				t.Fatalf("the edge cannot submit: %v", err)
			}
			r.Close()
			st, err := js.Stream(ctx, JobsStream)
			if err != nil {
				return err
			}
			_, err = st.GetMsg(ctx, 1)
			return err
		}},
		{"worker creates a stream capturing replies", RoleWorker, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SNOOP", Subjects: []string{ReplyPrefix + ">"}})
			return err
		}},
		{"edge updates the jobs stream", RoleEdge, func(ctx context.Context, js jetstream.JetStream) error {
			return Setup(ctx, js, StreamConfig{})
		}},
		{"operator republishes the jobs stream", RoleOperator, func(ctx context.Context, js jetstream.JetStream) error {
			st, err := js.Stream(ctx, JobsStream)
			if err != nil {
				return err
			}
			cfg := st.CachedInfo().Config
			cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "snoop.>"}
			_, err = js.UpdateStream(ctx, cfg)
			return err
		}},
		{"operator creates a stream capturing replies", RoleOperator, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SNOOP", Subjects: []string{ReplyPrefix + ">"}})
			return err
		}},
		{"operator sets the streams up", RoleOperator, func(ctx context.Context, js jetstream.JetStream) error {
			return Setup(ctx, js, StreamConfig{})
		}},
		{"operator reads a record", RoleOperator, func(ctx context.Context, js jetstream.JetStream) error {
			_, err := OpenResults(ctx, js)
			if err != nil {
				return err
			}
			kv, err := js.KeyValue(ctx, ResultsBucket)
			if err != nil {
				return err
			}
			_, err = kv.Get(ctx, ResultKey("roles-1"))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := env.conn(t, tc.role)
			tctx, tcancel := context.WithTimeout(ctx, time.Second)
			defer tcancel()
			err := tc.try(tctx, js)
			if err == nil {
				t.Fatalf("%s: allowed", tc.name)
			}
			// A refused request gets no answer: the server drops it.
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: %v, want a request the server dropped", tc.name, err)
			}
		})
	}
}

// TestCredentialsFiles: LoadOrCreateAuth writes 0600 seed files once and
// reads the same identities back; a seed readable by others is refused.
func TestCredentialsFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	a, err := LoadOrCreateAuth(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadOrCreateAuth(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range Roles() {
		if a.Credentials(role).PublicKey() != b.Credentials(role).PublicKey() {
			t.Fatalf("%s: a second load made a new key", role)
		}
		path := filepath.Join(dir, CredsFile(role))
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v mode %v", path, err, st.Mode().Perm())
		}
		c, err := LoadCredentials(path)
		if err != nil || c.PublicKey() != a.Credentials(role).PublicKey() {
			t.Fatalf("LoadCredentials(%s) = %v", path, err)
		}
	}
	path := filepath.Join(dir, CredsFile(RoleEdge))
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCredentials(path); !errors.Is(err, ErrCredentials) {
		t.Fatalf("a world-readable seed loaded: %v", err)
	}
	if _, err := ParseCredentials("x", []byte("not a seed\n")); !errors.Is(err, ErrCredentials) {
		t.Fatalf("ParseCredentials(garbage) = %v", err)
	}
}

// TestServerRefusesOpenListener: off loopback the server needs auth and TLS.
func TestServerRefusesOpenListener(t *testing.T) {
	a, err := NewAuth()
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []ServerConfig{
		{Host: "0.0.0.0", Port: -1, StoreDir: t.TempDir()},
		{Host: "0.0.0.0", Port: -1, StoreDir: t.TempDir(), Auth: a},
	} {
		if srv, err := StartServer(cfg); !errors.Is(err, ErrServer) {
			if srv != nil {
				srv.Shutdown()
			}
			t.Fatalf("StartServer(%s, auth %v) = %v, want ErrServer", cfg.Host, cfg.Auth != nil, err)
		}
	}
}

// TestCheckStreams: a stream changed to republish, to capture more subjects
// or to mirror is ErrTampered, and Ensure (every node's start) refuses it;
// Setup puts it back.
func TestCheckStreams(t *testing.T) {
	env := startAuthEnv(t, StreamConfig{})
	_, js := env.conn(t, RoleSetup)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckStreams(ctx, js); err != nil {
		t.Fatalf("as set up: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*jetstream.StreamConfig)
	}{
		{"republish", func(c *jetstream.StreamConfig) {
			c.RePublish = &jetstream.RePublish{Source: ">", Destination: "snoop.>"}
		}},
		{"extra subject", func(c *jetstream.StreamConfig) { c.Subjects = append(c.Subjects, ReplyPrefix+">") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := js.Stream(ctx, JobsStream)
			if err != nil {
				t.Fatal(err)
			}
			cfg := st.CachedInfo().Config
			tc.change(&cfg)
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if err := CheckStreams(ctx, js); !errors.Is(err, ErrTampered) {
				t.Fatalf("CheckStreams = %v, want ErrTampered", err)
			}
			if err := Ensure(ctx, js, StreamConfig{}); !errors.Is(err, ErrTampered) {
				t.Fatalf("Ensure = %v, want ErrTampered", err)
			}
			cfg.RePublish, cfg.Subjects = nil, []string{JobsPrefix + ">"}
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if err := CheckStreams(ctx, js); err != nil {
				t.Fatalf("restored: %v", err)
			}
		})
	}
}
