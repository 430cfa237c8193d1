package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
)

// Finetune storage: a tenant's LoRA adapters (docs/lora.md, "API and
// storage"). Each tenant's finetune records live in one key of the
// FinetunesBucket (the key is the tenant id), updated by compare-and-set,
// so the bound on a tenant's finetunes and the uniqueness of their names
// hold across edges; their files live in the AdaptersBucket object store,
// each under a name made of the tenant, the finetune id and the file's
// sha256 (AdapterObject), written once and never changed.
const (
	FinetunesBucket = "bulkhead_finetunes" // KV: one record per tenant, its finetunes
	AdaptersBucket  = "bulkhead_adapters"  // object store: the adapters' files

	// MaxFinetunes is the most finetunes a tenant may hold (Workers AI's
	// limit).
	MaxFinetunes = 30
	// MaxAdapterFileBytes bounds one adapter file.
	MaxAdapterFileBytes = 256 << 20
	// MaxFinetuneName and MaxFinetuneDescription bound a record's text.
	MaxFinetuneName        = 64
	MaxFinetuneDescription = 1024

	// maxFinetunesRecord bounds one tenant's record: MaxFinetunes records
	// at their largest fit.
	maxFinetunesRecord = 128 << 10
	// casTries bounds the compare-and-set retries of one change.
	casTries = 8
)

// Adapter file names accepted in a finetune: PEFT's pair, or one GGUF file
// (any name ending in .gguf, GGUFFileSuffix).
const (
	PEFTModelFile  = "adapter_model.safetensors"
	PEFTConfigFile = "adapter_config.json"
	GGUFFileSuffix = ".gguf"
)

// Finetune errors. A finetune another tenant holds is ErrFinetuneNotFound,
// exactly as one that does not exist.
var (
	ErrFinetuneNotFound = errors.New("queue: no such finetune")
	ErrFinetuneExists   = errors.New("queue: a finetune of that name exists")
	ErrFinetunesFull    = errors.New("queue: too many finetunes")
	ErrFinetuneInvalid  = errors.New("queue: invalid finetune")
	ErrAdapterTooLarge  = errors.New("queue: adapter file too large")
	// ErrAdapterQuota: the tenant's files would exceed its share of the
	// adapters object store (Finetunes.TenantBytes).
	ErrAdapterQuota = errors.New("queue: the tenant's adapter files would exceed its share of the store")
	// ErrAdapterDigest: a stored file's bytes do not hash to its record's
	// sha256.
	ErrAdapterDigest = errors.New("queue: adapter file does not match its sha256")
)

// FinetuneFile is one stored file of a finetune.
type FinetuneFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // hex
}

// Finetune is one tenant's LoRA adapter record.
type Finetune struct {
	ID          string         `json:"id"`
	Name        string         `json:"name"`  // unique among the tenant's finetunes
	Model       string         `json:"model"` // the base model's catalog name
	Description string         `json:"description"`
	CreatedAt   time.Time      `json:"created_at"`
	Files       []FinetuneFile `json:"files"`
}

// Ready reports whether the finetune holds a whole adapter: PEFT's two
// files, or one GGUF file.
func (f Finetune) Ready() bool {
	return f.file(PEFTModelFile) != nil && f.file(PEFTConfigFile) != nil || len(f.Files) == 1 && IsGGUFFile(f.Files[0].Name)
}

// File returns the finetune's file called name, or nil.
func (f Finetune) File(name string) *FinetuneFile { return f.file(name) }

func (f Finetune) file(name string) *FinetuneFile {
	for i := range f.Files {
		if f.Files[i].Name == name {
			return &f.Files[i]
		}
	}
	return nil
}

// Ref is what a job carries of the finetune (Job.LoRA).
func (f Finetune) Ref() *LoRARef {
	return &LoRARef{ID: f.ID, Name: f.Name, Files: slices.Clone(f.Files)}
}

// LoRARef is the adapter a job runs with: the edge resolved it among the
// job's tenant's finetunes. A worker fetches its files from the job's
// tenant's objects only (AdapterObject) and checks each file's sha256.
type LoRARef struct {
	ID    string         `json:"id"`
	Name  string         `json:"name"`
	Files []FinetuneFile `json:"files"`
}

// Digest identifies the adapter's bytes: the sha256 of its files' names and
// sha256s, in name order.
func (r *LoRARef) Digest() string {
	files := slices.Clone(r.Files)
	slices.SortFunc(files, func(a, b FinetuneFile) int { return strings.Compare(a.Name, b.Name) })
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%s\x00", f.Name, f.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r *LoRARef) validate() error {
	if !validFinetuneID(r.ID) || len(r.Files) == 0 || len(r.Files) > 2 {
		return fmt.Errorf("%w: lora %q with %d files", ErrBadMessage, r.ID, len(r.Files))
	}
	for _, f := range r.Files {
		if !ValidAdapterFile(f.Name) || !validSHA256(f.SHA256) || f.Size <= 0 || f.Size > MaxAdapterFileBytes {
			return fmt.Errorf("%w: lora %s file %q", ErrBadMessage, r.ID, f.Name)
		}
	}
	return nil
}

// IsGGUFFile reports whether name is a GGUF adapter's file name.
func IsGGUFFile(name string) bool { return strings.HasSuffix(name, GGUFFileSuffix) }

// ValidAdapterFile reports whether name may name a finetune's file: PEFT's
// two names, or 1 to 64 letters, digits, '-', '_' or '.' ending in .gguf.
func ValidAdapterFile(name string) bool {
	if name == PEFTModelFile || name == PEFTConfigFile {
		return true
	}
	if !IsGGUFFile(name) || len(name) > 64 || len(name) == len(GGUFFileSuffix) || name[0] == '.' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// AdapterObject is the object name of tenant's finetune id's file with
// digest sha: the tenant comes first, so a name built for one tenant never
// reads another's.
func AdapterObject(tenant, id string, f FinetuneFile) string {
	return tenant + "/" + id + "/" + f.SHA256 + "/" + f.Name
}

func validFinetuneID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if c != '-' {
				return false
			}
		} else if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func validSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && s == strings.ToLower(s)
}

// newFinetuneID returns a random UUID (version 4), the form Workers AI's
// finetune ids take.
func newFinetuneID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// validateNew checks a finetune to be created.
func (f Finetune) validateNew() error {
	switch {
	case f.Name == "" || len(f.Name) > MaxFinetuneName || !printable(f.Name) || strings.ContainsAny(f.Name, ":/"):
		return fmt.Errorf("%w: name must be 1 to %d printable characters but ':' and '/' (OpenAI's model names a finetune after a colon)", ErrFinetuneInvalid, MaxFinetuneName)
	case validFinetuneID(strings.ToLower(f.Name)):
		return fmt.Errorf("%w: name %q has the form of a finetune id", ErrFinetuneInvalid, f.Name)
	case f.Model == "":
		return fmt.Errorf("%w: model is required", ErrFinetuneInvalid)
	case len(f.Description) > MaxFinetuneDescription || !utf8.ValidString(f.Description):
		return fmt.Errorf("%w: description must be UTF-8 of at most %d bytes", ErrFinetuneInvalid, MaxFinetuneDescription)
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return false
		}
	}
	return true
}

// Finetunes reads and writes tenants' finetunes. Every method takes the
// tenant the caller verified and touches that tenant's key and objects
// only. It is safe for concurrent use.
type Finetunes struct {
	js          jetstream.JetStream
	kv          jetstream.KeyValue
	obj         jetstream.ObjectStore
	tenantBytes int64 // TenantBytes
}

// tenantShare is the part of the adapters object store one tenant's files
// may take, so that one tenant cannot fill it for the others.
const tenantShare = 4

// OpenFinetunes opens the finetunes bucket and the adapters object store
// (Setup creates both).
func OpenFinetunes(ctx context.Context, js jetstream.JetStream) (*Finetunes, error) {
	kv, err := js.KeyValue(ctx, FinetunesBucket)
	if err != nil {
		return nil, fmt.Errorf("queue: bucket %s: %w", FinetunesBucket, err)
	}
	obj, err := OpenAdapters(ctx, js)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, "OBJ_"+AdaptersBucket)
	if err != nil {
		return nil, fmt.Errorf("queue: object store %s: %w", AdaptersBucket, err)
	}
	per := int64(2 * MaxAdapterFileBytes) // an unbounded store
	if max := st.CachedInfo().Config.MaxBytes; max > 0 {
		per = max / tenantShare
	}
	return &Finetunes{js: js, kv: kv, obj: obj, tenantBytes: max(per, MaxAdapterFileBytes+maxFinetunesRecord)}, nil
}

// TenantBytes bounds the bytes of one tenant's adapter files, all its
// finetunes together: a quarter of the adapters object store, and at
// least one file of MaxAdapterFileBytes with its config.
func (s *Finetunes) TenantBytes() int64 { return s.tenantBytes }

// tenantBytesWith is what tenant's files would take with file in place of
// the files it replaces in finetune id (PutFile's rule).
func tenantBytesWith(tf *tenantFinetunes, id string, file FinetuneFile) int64 {
	n := file.Size
	for _, f := range tf.Finetunes {
		for _, g := range f.Files {
			if f.ID == id && (g.Name == file.Name || IsGGUFFile(g.Name) || IsGGUFFile(file.Name)) {
				continue
			}
			n += g.Size
		}
	}
	return n
}

// OpenAdapters opens the adapters object store: what a worker reads
// adapter files from (ReadAdapterFile).
func OpenAdapters(ctx context.Context, js jetstream.JetStream) (jetstream.ObjectStore, error) {
	obj, err := js.ObjectStore(ctx, AdaptersBucket)
	if err != nil {
		return nil, fmt.Errorf("queue: object store %s: %w", AdaptersBucket, err)
	}
	return obj, nil
}

// tenantFinetunes is one tenant's record in the finetunes bucket.
type tenantFinetunes struct {
	Finetunes []Finetune `json:"finetunes"`
}

// load reads tenant's finetunes and the record's revision (0: none yet).
func (s *Finetunes) load(ctx context.Context, tenant string) (tenantFinetunes, uint64, error) {
	var tf tenantFinetunes
	if !ValidTenant(tenant) {
		return tf, 0, fmt.Errorf("%w: tenant %q", ErrFinetuneInvalid, tenant)
	}
	e, err := s.kv.Get(ctx, tenant)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return tf, 0, nil
	}
	if err != nil {
		return tf, 0, unavailable(err)
	}
	if err := json.Unmarshal(e.Value(), &tf); err != nil {
		return tf, 0, fmt.Errorf("%w: finetunes of %s: %v", ErrBadMessage, tenant, err)
	}
	return tf, e.Revision(), nil
}

// update applies change to tenant's finetunes and stores them if the
// record did not change meanwhile, retrying from a fresh read otherwise.
func (s *Finetunes) update(ctx context.Context, tenant string, change func(*tenantFinetunes) error) error {
	for range casTries {
		tf, rev, err := s.load(ctx, tenant)
		if err != nil {
			return err
		}
		if err := change(&tf); err != nil {
			return err
		}
		b, err := json.Marshal(tf)
		if err != nil {
			return err
		}
		if len(b) > maxFinetunesRecord {
			return fmt.Errorf("%w: the record of %d bytes exceeds %d", ErrFinetuneInvalid, len(b), maxFinetunesRecord)
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, tenant, b)
		} else {
			_, err = s.kv.Update(ctx, tenant, b, rev)
		}
		switch {
		case err == nil:
			return nil
		case casConflict(err):
			continue // changed meanwhile: read again
		default:
			return unavailable(err)
		}
	}
	return fmt.Errorf("%w: finetunes of %s changed %d times while being updated", ErrUnavailable, tenant, casTries)
}

func unavailable(err error) error { return fmt.Errorf("%w: %w", ErrUnavailable, err) }

// casConflict says whether err refused a write because the key's revision
// moved (or, for a create, the key exists): error code 10071 on a
// single-replica stream, 10164 on a replicated one.
func casConflict(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Create adds a finetune (Name, Model, Description) to tenant's and
// returns it with its new id and time. A name the tenant already uses is
// ErrFinetuneExists; past MaxFinetunes, ErrFinetunesFull.
func (s *Finetunes) Create(ctx context.Context, tenant string, f Finetune) (Finetune, error) {
	if err := f.validateNew(); err != nil {
		return Finetune{}, err
	}
	f.ID, f.CreatedAt, f.Files = newFinetuneID(), time.Now().UTC().Truncate(time.Millisecond), []FinetuneFile{}
	err := s.update(ctx, tenant, func(tf *tenantFinetunes) error {
		if len(tf.Finetunes) >= MaxFinetunes {
			return fmt.Errorf("%w: a tenant may hold %d", ErrFinetunesFull, MaxFinetunes)
		}
		for _, g := range tf.Finetunes {
			if g.Name == f.Name {
				return fmt.Errorf("%w: %q", ErrFinetuneExists, f.Name)
			}
		}
		tf.Finetunes = append(tf.Finetunes, f)
		return nil
	})
	if err != nil {
		return Finetune{}, err
	}
	return f, nil
}

// List returns tenant's finetunes, oldest first.
func (s *Finetunes) List(ctx context.Context, tenant string) ([]Finetune, error) {
	tf, _, err := s.load(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return tf.Finetunes, nil
}

// Get returns tenant's finetune with id or name ref; model, when not
// empty, must be its base model. Anything else, another tenant's finetune
// included, is ErrFinetuneNotFound: the lookup reads tenant's record only.
func (s *Finetunes) Get(ctx context.Context, tenant, model, ref string) (Finetune, error) {
	tf, _, err := s.load(ctx, tenant)
	if err != nil {
		return Finetune{}, err
	}
	for _, f := range tf.Finetunes {
		if (f.ID == ref || f.Name == ref) && (model == "" || f.Model == model) {
			return f, nil
		}
	}
	return Finetune{}, ErrFinetuneNotFound
}

// Delete removes tenant's finetune id and its files.
func (s *Finetunes) Delete(ctx context.Context, tenant, id string) error {
	var gone Finetune
	err := s.update(ctx, tenant, func(tf *tenantFinetunes) error {
		i := slices.IndexFunc(tf.Finetunes, func(f Finetune) bool { return f.ID == id })
		if i < 0 {
			return ErrFinetuneNotFound
		}
		gone = tf.Finetunes[i]
		tf.Finetunes = slices.Delete(tf.Finetunes, i, i+1)
		return nil
	})
	if err != nil {
		return err
	}
	for _, f := range gone.Files {
		if err := s.deleteObject(ctx, tenant, id, f); err != nil {
			return err
		}
	}
	return nil
}

func (s *Finetunes) deleteObject(ctx context.Context, tenant, id string, f FinetuneFile) error {
	err := s.obj.Delete(ctx, AdapterObject(tenant, id, f))
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return unavailable(err)
	}
	return nil
}

// PutFile stores data as the file called name of tenant's finetune id,
// replacing a file of that name; a GGUF file replaces PEFT's and the
// other way round (a finetune holds one adapter). It returns the finetune
// as it is now. The caller validated the adapter.
func (s *Finetunes) PutFile(ctx context.Context, tenant, id, name string, data []byte) (Finetune, error) {
	switch {
	case !ValidAdapterFile(name):
		return Finetune{}, fmt.Errorf("%w: file_name %q: want %s, %s or a .gguf file", ErrFinetuneInvalid, name, PEFTModelFile, PEFTConfigFile)
	case len(data) > MaxAdapterFileBytes:
		return Finetune{}, fmt.Errorf("%w: %d bytes, the limit is %d", ErrAdapterTooLarge, len(data), MaxAdapterFileBytes)
	case len(data) == 0:
		return Finetune{}, fmt.Errorf("%w: file %s is empty", ErrFinetuneInvalid, name)
	}
	sum := sha256.Sum256(data)
	file := FinetuneFile{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	tf, _, err := s.load(ctx, tenant)
	if err != nil {
		return Finetune{}, err
	}
	if !slices.ContainsFunc(tf.Finetunes, func(f Finetune) bool { return f.ID == id }) {
		return Finetune{}, ErrFinetuneNotFound
	}
	if err := s.checkQuota(&tf, id, file); err != nil {
		return Finetune{}, err
	}
	wrote, err := putObject(ctx, s.js, s.obj, AdapterObject(tenant, id, file), data)
	if err != nil {
		return Finetune{}, err
	}
	var now Finetune
	var replaced []FinetuneFile
	err = s.update(ctx, tenant, func(tf *tenantFinetunes) error {
		i := slices.IndexFunc(tf.Finetunes, func(f Finetune) bool { return f.ID == id })
		if i < 0 {
			return ErrFinetuneNotFound
		}
		if err := s.checkQuota(tf, id, file); err != nil {
			return err
		}
		f := &tf.Finetunes[i]
		replaced = replaced[:0]
		keep := f.Files[:0:0]
		for _, g := range f.Files {
			if g.Name == name || IsGGUFFile(g.Name) || IsGGUFFile(name) {
				if g != file {
					replaced = append(replaced, g)
				}
				continue
			}
			keep = append(keep, g)
		}
		f.Files = append(keep, file)
		now = *f
		return nil
	})
	if err != nil {
		if wrote { // else a record may hold it already
			_ = s.deleteObject(context.WithoutCancel(ctx), tenant, id, file)
		}
		return Finetune{}, err
	}
	for _, g := range replaced {
		if err := s.deleteObject(ctx, tenant, id, g); err != nil {
			return Finetune{}, err
		}
	}
	return now, nil
}

func (s *Finetunes) checkQuota(tf *tenantFinetunes, id string, file FinetuneFile) error {
	if n := tenantBytesWith(tf, id, file); n > s.tenantBytes {
		return fmt.Errorf("%w: %d bytes with this file, the bound is %d", ErrAdapterQuota, n, s.tenantBytes)
	}
	return nil
}

// ReadFile returns the bytes of tenant's finetune id's file f, checked
// against its sha256 (ErrAdapterDigest).
func (s *Finetunes) ReadFile(ctx context.Context, tenant, id string, f FinetuneFile) ([]byte, error) {
	return ReadAdapterFile(ctx, s.obj, tenant, id, f)
}

// ReadAdapterFile reads tenant's finetune id's file f from the adapters
// object store obj (at most f.Size bytes) and checks its sha256: a worker's
// way to fetch the adapter of a job (Job.Tenant, Job.LoRA). It reads in up
// to adapterAttempts attempts, each within adapterAttemptTimeout: a read
// whose stream leader was lost (a NATS server down) waits for chunks that
// never come until its deadline, and the next attempt reads from the new
// leader. A file that is missing or does not match its sha256 is not read
// again.
func ReadAdapterFile(ctx context.Context, obj jetstream.ObjectStore, tenant, id string, f FinetuneFile) ([]byte, error) {
	if !ValidTenant(tenant) || !validFinetuneID(id) || !ValidAdapterFile(f.Name) || f.Size > MaxAdapterFileBytes {
		return nil, fmt.Errorf("%w: adapter file %q of %q", ErrFinetuneInvalid, f.Name, id)
	}
	name := AdapterObject(tenant, id, f)
	for attempt := 1; ; attempt++ {
		b, err := readAdapterOnce(ctx, obj, name, f)
		if err == nil || !errors.Is(err, ErrUnavailable) || attempt == adapterAttempts || ctx.Err() != nil {
			return b, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(adapterRetryPause):
		}
	}
}

// adapterAttempts bounds the reads of one adapter file, and
// adapterRetryPause is the pause between two.
const (
	adapterAttempts   = 3
	adapterRetryPause = 250 * time.Millisecond
)

// adapterAttemptTimeout bounds one read of an adapter file of size bytes:
// 5 s (the NATS client's own default for a request), and a second more for
// each 16 MiB. Short enough that a decode worker whose first read stalled
// has the adapter before a prefill worker gives up its hand-over (10 s).
var adapterAttemptTimeout = func(size int64) time.Duration {
	return 5*time.Second + time.Duration(size>>24)*time.Second
}

// readAdapterOnce is one attempt of ReadAdapterFile at the object name.
func readAdapterOnce(ctx context.Context, obj jetstream.ObjectStore, name string, f FinetuneFile) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, adapterAttemptTimeout(f.Size))
	defer cancel()
	r, err := obj.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: file %s", ErrFinetuneNotFound, f.Name)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, f.Size+1))
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		return nil, fmt.Errorf("%w: %s: %w", ErrAdapterDigest, f.Name, err)
	}
	if err != nil {
		return nil, unavailable(err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != f.Size || hex.EncodeToString(sum[:]) != f.SHA256 {
		return nil, fmt.Errorf("%w: %s has %d bytes with sha256 %x, want %d bytes with %s", ErrAdapterDigest, f.Name, len(b), sum, f.Size, f.SHA256)
	}
	return b, nil
}
