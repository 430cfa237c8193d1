package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func openFinetunes(t *testing.T) (*testEnv, *Finetunes) {
	t.Helper()
	env := startEnv(t, StreamConfig{Memory: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ft, err := OpenFinetunes(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	return env, ft
}

// TestFinetunesRoundTrip creates, uploads, lists, reads and deletes a
// finetune, and checks the bounds: names unique per tenant, MaxFinetunes,
// file names and sizes.
func TestFinetunesRoundTrip(t *testing.T) {
	_, ft := openFinetunes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := ft.Create(ctx, "alice", Finetune{Name: "poet", Model: "@cf/test/m", Description: "rhymes"})
	if err != nil {
		t.Fatal(err)
	}
	if !validFinetuneID(f.ID) || f.CreatedAt.IsZero() || f.Ready() {
		t.Fatalf("created %+v", f)
	}
	if _, err := ft.Create(ctx, "alice", Finetune{Name: "poet", Model: "@cf/test/m"}); !errors.Is(err, ErrFinetuneExists) {
		t.Fatalf("same name again: %v, want ErrFinetuneExists", err)
	}
	if _, err := ft.Create(ctx, "bob", Finetune{Name: "poet", Model: "@cf/test/m"}); err != nil {
		t.Fatalf("another tenant's same name: %v", err)
	}
	for _, name := range []string{"", "a:b", "a/b", "line\nbreak", f.ID, strings.Repeat("n", MaxFinetuneName+1)} {
		if _, err := ft.Create(ctx, "alice", Finetune{Name: name, Model: "@cf/test/m"}); !errors.Is(err, ErrFinetuneInvalid) {
			t.Errorf("name %q: %v, want ErrFinetuneInvalid", name, err)
		}
	}
	cfg, model := []byte(`{"r":8}`), bytes.Repeat([]byte{7}, 3<<17) // several chunks
	if _, err := ft.PutFile(ctx, "alice", f.ID, PEFTConfigFile, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := ft.PutFile(ctx, "alice", f.ID, PEFTModelFile, model)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Ready() || len(got.Files) != 2 {
		t.Fatalf("after both PEFT files: %+v", got)
	}
	b, err := ft.ReadFile(ctx, "alice", f.ID, *got.File(PEFTModelFile))
	if err != nil || !bytes.Equal(b, model) {
		t.Fatalf("read back %d bytes, %v", len(b), err)
	}
	for _, tc := range []struct {
		name, file string
		data       []byte
		want       error
	}{
		{"unknown file name", "weights.bin", cfg, ErrFinetuneInvalid},
		{"path in the name", "../x.gguf", cfg, ErrFinetuneInvalid},
		{"empty file", PEFTConfigFile, nil, ErrFinetuneInvalid},
		{"too large", "a.gguf", make([]byte, MaxAdapterFileBytes+1), ErrAdapterTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ft.PutFile(ctx, "alice", f.ID, tc.file, tc.data); !errors.Is(err, tc.want) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
		})
	}
	// A GGUF file replaces PEFT's pair.
	got, err = ft.PutFile(ctx, "alice", f.ID, "adapter.gguf", []byte("GGUF..."))
	if err != nil || len(got.Files) != 1 || !got.Ready() {
		t.Fatalf("gguf: %+v %v", got, err)
	}
	list, err := ft.List(ctx, "alice")
	if err != nil || len(list) != 1 || list[0].ID != f.ID {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := ft.Delete(ctx, "alice", f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.ReadFile(ctx, "alice", f.ID, got.Files[0]); !errors.Is(err, ErrFinetuneNotFound) {
		t.Fatalf("file after delete: %v", err)
	}
	if _, err := ft.Get(ctx, "alice", "", f.ID); !errors.Is(err, ErrFinetuneNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestFinetunesBound: a tenant's 31st finetune is refused; another
// tenant's are not counted.
func TestFinetunesBound(t *testing.T) {
	_, ft := openFinetunes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range MaxFinetunes {
		if _, err := ft.Create(ctx, "alice", Finetune{Name: fmt.Sprint("n", i), Model: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ft.Create(ctx, "alice", Finetune{Name: "one-more", Model: "m"}); !errors.Is(err, ErrFinetunesFull) {
		t.Fatalf("31st: %v, want ErrFinetunesFull", err)
	}
	if _, err := ft.Create(ctx, "bob", Finetune{Name: "n0", Model: "m"}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// TestFinetunesOtherTenant: tenant B's every lookup of tenant A's finetune,
// by id or by name, is ErrFinetuneNotFound, as for one that never existed.
func TestFinetunesOtherTenant(t *testing.T) {
	_, ft := openFinetunes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := ft.Create(ctx, "alice", Finetune{Name: "secret", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ft.PutFile(ctx, "alice", f.ID, "a.gguf", []byte("GGUF"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"get by id", func() error { _, err := ft.Get(ctx, "bob", "", f.ID); return err }},
		{"get by name", func() error { _, err := ft.Get(ctx, "bob", "m", "secret"); return err }},
		{"upload", func() error { _, err := ft.PutFile(ctx, "bob", f.ID, "a.gguf", []byte("x")); return err }},
		{"delete", func() error { return ft.Delete(ctx, "bob", f.ID) }},
		{"read file", func() error { _, err := ft.ReadFile(ctx, "bob", f.ID, got.Files[0]); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op(); !errors.Is(err, ErrFinetuneNotFound) {
				t.Fatalf("%v, want ErrFinetuneNotFound", err)
			}
		})
	}
	if list, err := ft.List(ctx, "bob"); err != nil || len(list) != 0 {
		t.Fatalf("bob lists %+v %v", list, err)
	}
	if _, err := ft.Get(ctx, "alice", "", f.ID); err != nil {
		t.Fatalf("alice's finetune after bob's tries: %v", err)
	}
}

// TestFinetunesLookupTimesAlike: tenant bob's lookups of alice's finetune,
// by id and by name, send the bus exactly the requests that lookups of
// finetunes nobody holds send (one read of bob's own record, nothing that
// names alice), so the time they take tells bob nothing about alice's
// adapters.
func TestFinetunesLookupTimesAlike(t *testing.T) {
	env, ft := openFinetunes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := ft.Create(ctx, "alice", Finetune{Name: "secret", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ft.Create(ctx, "bob", Finetune{Name: "mine", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	spy, err := nats.Connect(env.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	seen := make(chan *nats.Msg, 64)
	if _, err := spy.ChanSubscribe("$JS.API.>", seen); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	// requests runs get and returns what it sent the bus, in order.
	requests := func(ref string) []string {
		t.Helper()
		if _, err := ft.Get(ctx, "bob", "m", ref); !errors.Is(err, ErrFinetuneNotFound) {
			t.Fatalf("bob's lookup of %q: %v, want ErrFinetuneNotFound", ref, err)
		}
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		// The server may hand a JetStream API request to the spy after it
		// answered the lookup (and the spy's flush): wait for stragglers.
		var out []string
		for {
			select {
			case m := <-seen:
				out = append(out, m.Subject+" "+string(m.Data))
			case <-time.After(200 * time.Millisecond):
				return out
			}
		}
	}
	nobody := requests("00000000-0000-4000-8000-000000000000")
	if len(nobody) != 1 || !strings.Contains(nobody[0], "bob") {
		t.Fatalf("a lookup sent %q, want one read of bob's record", nobody)
	}
	for _, ref := range []string{f.ID, "secret", "no-such-name"} {
		if got := requests(ref); !slices.Equal(got, nobody) || strings.Contains(strings.Join(got, " "), "alice") {
			t.Errorf("bob's lookup of %q sent %q; a lookup of a finetune nobody holds sends %q", ref, got, nobody)
		}
	}
}

// oneAdapterFile stores alice's finetune with one adapter file, a.gguf,
// and returns the finetune, the file and the adapters object store.
func oneAdapterFile(t *testing.T, ctx context.Context) (*testEnv, Finetune, FinetuneFile, jetstream.ObjectStore) {
	t.Helper()
	env, ft := openFinetunes(t)
	f, err := ft.Create(ctx, "alice", Finetune{Name: "x", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ft.PutFile(ctx, "alice", f.ID, "a.gguf", []byte("GGUF-bytes"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := OpenAdapters(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	return env, f, got.Files[0], obj
}

// TestAdapterDigestChecked: a file whose bytes do not match the sha256 its
// reader was given is refused.
func TestAdapterDigestChecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, f, file, obj := oneAdapterFile(t, ctx)
	if err := obj.Delete(ctx, AdapterObject("alice", f.ID, file)); err != nil {
		t.Fatal(err)
	}
	if _, err := putObject(ctx, env.js, obj, AdapterObject("alice", f.ID, file), []byte("GGUF-other")); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAdapterFile(ctx, obj, "alice", f.ID, file); !errors.Is(err, ErrAdapterDigest) {
		t.Fatalf("changed bytes: %v, want ErrAdapterDigest", err)
	}
}

// TestFinetunesReplicatedAsStreams: on a three-server cluster the
// finetunes bucket and the adapters object store get the streams'
// replicas and storage, and Replicated waits for them too.
func TestFinetunesReplicatedAsStreams(t *testing.T) {
	srvs, js := clusterJS(t)
	eventually(t, 30*time.Second, func(ctx context.Context) error { return Setup(ctx, js, StreamConfig{Replicas: 3}) })
	eventually(t, 30*time.Second, func(ctx context.Context) error { return Replicated(ctx, js, 3) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs, err := js.Stream(ctx, JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	want := jobs.CachedInfo().Config
	for _, name := range []string{"KV_" + FinetunesBucket, "OBJ_" + AdaptersBucket} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := st.CachedInfo().Config
		if got.Replicas != want.Replicas || got.Storage != want.Storage {
			t.Errorf("%s: replicas %d storage %v, want the jobs stream's %d %v", name, got.Replicas, got.Storage, want.Replicas, want.Storage)
		}
		if got.AllowDirect {
			t.Errorf("%s allows direct gets: a follower may answer a read before it applied the write", name)
		}
	}
	if err := CheckStreams(ctx, js); err != nil {
		t.Fatal(err)
	}
	// Read after write through another server: a finetune created through
	// one connection is found at once through the others.
	fts := make([]*Finetunes, len(srvs))
	for i, s := range srvs {
		c, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cjs, err := jetstream.New(c)
		if err != nil {
			t.Fatal(err)
		}
		if fts[i], err = OpenFinetunes(ctx, cjs); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		f, err := fts[i%3].Create(ctx, "acme", Finetune{Name: fmt.Sprintf("ft-%d", i), Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fts[(i+1)%3].Get(ctx, "acme", "m", f.ID); err != nil {
			t.Fatalf("finetune %d created through server %d, read through %d: %v", i, i%3, (i+1)%3, err)
		}
	}
}

// TestFinetunesRoles: on an authenticated bus the edge role creates,
// uploads, reads and deletes finetunes, the worker role reads an adapter's
// file, and the billing role reads neither store.
func TestFinetunesRoles(t *testing.T) {
	env := startAuthEnv(t, StreamConfig{Memory: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, ejs := env.conn(t, RoleEdge)
	ft, err := OpenFinetunes(ctx, ejs)
	if err != nil {
		t.Fatalf("edge opens finetunes: %v", err)
	}
	f, err := ft.Create(ctx, "alice", Finetune{Name: "x", Model: "m"})
	if err != nil {
		t.Fatalf("edge creates: %v", err)
	}
	data := bytes.Repeat([]byte("lora"), 1<<16)
	got, err := ft.PutFile(ctx, "alice", f.ID, "a.gguf", data)
	if err != nil {
		t.Fatalf("edge uploads: %v", err)
	}
	if _, err := ft.ReadFile(ctx, "alice", f.ID, got.Files[0]); err != nil {
		t.Fatalf("edge reads back: %v", err)
	}
	_, wjs := env.conn(t, RoleWorker)
	obj, err := OpenAdapters(ctx, wjs)
	if err != nil {
		t.Fatalf("worker opens adapters: %v", err)
	}
	if b, err := ReadAdapterFile(ctx, obj, "alice", f.ID, got.Files[0]); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("worker reads %d bytes: %v", len(b), err)
	}
	short, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	if _, err := putObject(short, wjs, obj, "alice/forged", []byte("x")); err == nil {
		t.Fatal("worker wrote an adapter object")
	}
	_, bjs := env.conn(t, RoleBilling)
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	defer bcancel()
	bft, err := OpenFinetunes(bctx, bjs) // stream info: every role may read configurations
	if err != nil {
		t.Fatal(err)
	}
	if list, err := bft.List(bctx, "alice"); err == nil {
		t.Fatalf("billing read alice's finetunes: %+v", list)
	}
	if _, err := bft.ReadFile(bctx, "alice", f.ID, got.Files[0]); err == nil {
		t.Fatal("billing read alice's adapter")
	}
	if err := ft.Delete(ctx, "alice", f.ID); err != nil {
		t.Fatalf("edge deletes: %v", err)
	}
}

// TestJobLoRAValidated: a job's adapter names an id of ours and one or two
// adapter files with sha256s; anything else does not decode.
func TestJobLoRAValidated(t *testing.T) {
	file := FinetuneFile{Name: "adapter.gguf", Size: 10, SHA256: strings.Repeat("ab", 32)}
	for _, tc := range []struct {
		name string
		ref  *LoRARef
		ok   bool
	}{
		{"valid", &LoRARef{ID: newFinetuneID(), Name: "poet", Files: []FinetuneFile{file}}, true},
		{"id not ours", &LoRARef{ID: "../other", Files: []FinetuneFile{file}}, false},
		{"no files", &LoRARef{ID: newFinetuneID()}, false},
		{"three files", &LoRARef{ID: newFinetuneID(), Files: []FinetuneFile{file, file, file}}, false},
		{"path as file name", &LoRARef{ID: newFinetuneID(), Files: []FinetuneFile{{Name: "../a.gguf", Size: 1, SHA256: file.SHA256}}}, false},
		{"bad sha256", &LoRARef{ID: newFinetuneID(), Files: []FinetuneFile{{Name: "a.gguf", Size: 1, SHA256: "xyz"}}}, false},
		{"empty file", &LoRARef{ID: newFinetuneID(), Files: []FinetuneFile{{Name: "a.gguf", SHA256: file.SHA256}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJob("j")
			j.LoRA = tc.ref
			b, err := EncodeJob(j)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeJob(b)
			switch {
			case tc.ok && (err != nil || got.LoRA.ID != tc.ref.ID || got.LoRA.Digest() != tc.ref.Digest()):
				t.Fatalf("decoded %+v, %v", got, err)
			case !tc.ok && !errors.Is(err, ErrBadMessage):
				t.Fatalf("%v, want ErrBadMessage", err)
			}
		})
	}
}

// TestFinetunesTenantShare: one tenant's files stay within its share of
// the adapters object store (a quarter, at least one whole adapter); a
// file replacing another counts once; another tenant has its own share.
func TestFinetunesTenantShare(t *testing.T) {
	env := startEnv(t, StreamConfig{Memory: true, AdaptersMaxBytes: 2 << 30})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ft, err := OpenFinetunes(ctx, env.js)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ft.TenantBytes(), int64(512<<20); got != want {
		t.Fatalf("TenantBytes %d of a 2 GiB store, want %d", got, want)
	}
	ft.tenantBytes = 100 // small files below
	a, err := ft.Create(ctx, "alice", Finetune{Name: "a", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ft.Create(ctx, "alice", Finetune{Name: "b", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ft.PutFile(ctx, "alice", a.ID, "a.gguf", make([]byte, 80)); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.PutFile(ctx, "alice", a.ID, "b.gguf", make([]byte, 90)); err != nil {
		t.Fatalf("a file replacing the other: %v", err)
	}
	if _, err := ft.PutFile(ctx, "alice", b.ID, PEFTConfigFile, make([]byte, 11)); !errors.Is(err, ErrAdapterQuota) {
		t.Fatalf("past the share: %v, want ErrAdapterQuota", err)
	}
	if _, err := ft.PutFile(ctx, "alice", b.ID, PEFTConfigFile, make([]byte, 10)); err != nil {
		t.Fatalf("up to the share: %v", err)
	}
	c, err := ft.Create(ctx, "bob", Finetune{Name: "c", Model: "m"})
	if err == nil {
		_, err = ft.PutFile(ctx, "bob", c.ID, "c.gguf", make([]byte, 100))
	}
	if err != nil {
		t.Fatalf("another tenant: %v", err)
	}
}

// stallingStore is the adapters object store whose first stalls reads
// stall: their chunks never come, as when the stream's leader was lost, so
// that a read waits until its context ends.
type stallingStore struct {
	jetstream.ObjectStore
	stalls, gets int
}

func (s *stallingStore) Get(ctx context.Context, name string, opts ...jetstream.GetObjectOpt) (jetstream.ObjectResult, error) {
	s.gets++
	if s.gets <= s.stalls {
		return stalledRead{ctx: ctx}, nil
	}
	return s.ObjectStore.Get(ctx, name, opts...)
}

// stalledRead is an object read whose chunks never come.
type stalledRead struct {
	jetstream.ObjectResult
	ctx context.Context
}

func (r stalledRead) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, nats.ErrTimeout // what the client's read gives at its deadline
}

func (stalledRead) Close() error { return nil }

// TestReadAdapterFileAfterStall: a read of an adapter file that stalls is
// given up at its attempt's deadline and made again, and the file arrives;
// one that stalls every time ends unavailable after adapterAttempts, well
// before its context ends. (The attempts' deadline is lowered here from its
// 5 s.)
func TestReadAdapterFileAfterStall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, f, file, obj := oneAdapterFile(t, ctx)
	prev := adapterAttemptTimeout
	adapterAttemptTimeout = func(int64) time.Duration { return 200 * time.Millisecond }
	t.Cleanup(func() { adapterAttemptTimeout = prev })

	once := &stallingStore{ObjectStore: obj, stalls: 1}
	if b, err := ReadAdapterFile(ctx, once, "alice", f.ID, file); err != nil || string(b) != "GGUF-bytes" || once.gets != 2 {
		t.Fatalf("after one stall: %q, %v in %d reads; want the file in 2", b, err, once.gets)
	}
	always := &stallingStore{ObjectStore: obj, stalls: 1 << 30}
	if _, err := ReadAdapterFile(ctx, always, "alice", f.ID, file); !errors.Is(err, ErrUnavailable) || always.gets != adapterAttempts || ctx.Err() != nil {
		t.Fatalf("stalling every time: %v in %d reads (context: %v); want ErrUnavailable after %d", err, always.gets, ctx.Err(), adapterAttempts)
	}
}

// TestCASConflict: a write refused because the key's revision moved is a
// conflict to retry: Update at a stale revision and Create of a key that
// exists, on a single-replica and a replicated bucket (code 10071), and
// code 10164, which a replicated stream's leader answers while an earlier
// write to the key is still being applied (a race a test cannot set up
// reliably, so it is given as the error the client returns).
func TestCASConflict(t *testing.T) {
	for _, code := range []jetstream.ErrorCode{jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant} {
		err := fmt.Errorf("nats: %w: %w", &jetstream.APIError{Code: 400, ErrorCode: code, Description: "wrong last sequence"}, jetstream.ErrKeyRevisionMismatch)
		if !casConflict(err) {
			t.Errorf("code %d: %v, not a conflict", code, err)
		}
	}
	_, js := clusterJS(t)
	for _, replicas := range []int{1, 3} {
		var kv jetstream.KeyValue
		eventually(t, 30*time.Second, func(ctx context.Context) error {
			var err error
			kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("cas_r%d", replicas), Replicas: replicas})
			return err
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rev, err := kv.Create(ctx, "k", []byte("a"))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if _, err := kv.Update(ctx, "k", []byte("b"), rev+5); !casConflict(err) {
			t.Errorf("R%d: Update at a stale revision: %v, not a conflict", replicas, err)
		}
		if _, err := kv.Create(ctx, "k", []byte("c")); !casConflict(err) {
			t.Errorf("R%d: Create of an existing key: %v, not a conflict", replicas, err)
		}
		if _, err := kv.Get(ctx, "absent"); casConflict(err) {
			t.Errorf("R%d: a missing key counts as a conflict: %v", replicas, err)
		}
		cancel()
	}
}
