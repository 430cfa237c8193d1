package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/catalog"
	"github.com/bulkhead-ai/bulkhead/models/lora"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// FinetuneStore keeps tenants' finetunes (LoRA adapters). queue.Finetunes
// implements it; every method reads and writes the given tenant's
// finetunes only, and another tenant's is queue.ErrFinetuneNotFound.
type FinetuneStore interface {
	Create(ctx context.Context, tenant string, f queue.Finetune) (queue.Finetune, error)
	List(ctx context.Context, tenant string) ([]queue.Finetune, error)
	Get(ctx context.Context, tenant, model, ref string) (queue.Finetune, error)
	Delete(ctx context.Context, tenant, id string) error
	PutFile(ctx context.Context, tenant, id, name string, data []byte) (queue.Finetune, error)
	ReadFile(ctx context.Context, tenant, id string, f queue.FinetuneFile) ([]byte, error)
}

var _ FinetuneStore = (*queue.Finetunes)(nil)

// DefaultMaxUploads bounds the adapter uploads one edge holds in memory at
// once (Config.MaxUploads).
const DefaultMaxUploads = 2

// DefaultUploadTimeout is how long an upload's body may take to arrive
// (Config.UploadTimeout): 256 MiB at about 450 KiB/s.
const DefaultUploadTimeout = 10 * time.Minute

// Finetune refusals the edge decides itself.
var (
	// ErrUploadsBusy: MaxUploads uploads are in progress on this edge.
	ErrUploadsBusy = errors.New("edge: too many adapter uploads in progress")
	// ErrNoFinetunes: a request names a lora on an edge without a
	// finetune store.
	ErrNoFinetunes = errors.New("edge: LoRA adapters are not enabled")
)

// finetuneRoutes registers the finetune API (Workers AI's shape) under both
// prefixes, when the edge has a store.
func (s *Server) finetuneRoutes(mux *http.ServeMux) {
	if s.cfg.Finetunes == nil {
		return
	}
	for _, prefix := range []string{"", accountPrefix} {
		base := prefix + "/ai/finetunes"
		mux.HandleFunc("POST "+base, s.handleFinetuneCreate)
		mux.HandleFunc("GET "+base, s.handleFinetuneList)
		mux.HandleFunc("GET "+base+"/{id}", s.handleFinetuneGet)
		mux.HandleFunc("DELETE "+base+"/{id}", s.handleFinetuneDelete)
		mux.HandleFunc("POST "+base+"/{id}/finetune-assets", s.handleFinetuneUpload)
	}
}

// finetuneRequest is the body of POST .../ai/finetunes.
type finetuneRequest struct {
	Name        string `json:"name"`
	Model       string `json:"model"`
	Description string `json:"description"`
}

// handleFinetuneCreate serves POST .../ai/finetunes: a new, empty finetune
// of a catalog text-generation model the token may use.
func (s *Server) handleFinetuneCreate(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeFinetunesWrite)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	var req finetuneRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), &req); err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	if req.Model == "" {
		writeNativeError(w, s.refuse(r, &InputError{Field: "model", Msg: "is required"}))
		return
	}
	m, _, err := s.lookupModel(p, req.Model)
	if err == nil {
		err = encoderTask(m, catalog.TaskTextGeneration, "adapters apply to text-generation models")
	}
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	f, err := s.cfg.Finetunes.Create(r.Context(), p.Tenant, queue.Finetune{Name: req.Name, Model: m.Name, Description: req.Description})
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	writeJSON(w, http.StatusOK, success(f))
}

// handleFinetuneList serves GET .../ai/finetunes: the caller's own.
func (s *Server) handleFinetuneList(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeFinetunesWrite, auth.ScopeRead)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	list, err := s.cfg.Finetunes.List(r.Context(), p.Tenant)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	if list == nil {
		list = []queue.Finetune{}
	}
	writeJSON(w, http.StatusOK, success(list))
}

// handleFinetuneGet serves GET .../ai/finetunes/{id}: one of the caller's,
// by id or name.
func (s *Server) handleFinetuneGet(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeFinetunesWrite, auth.ScopeRead)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	f, err := s.cfg.Finetunes.Get(r.Context(), p.Tenant, "", r.PathValue("id"))
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	writeJSON(w, http.StatusOK, success(f))
}

// handleFinetuneDelete serves DELETE .../ai/finetunes/{id}.
func (s *Server) handleFinetuneDelete(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeFinetunesWrite)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	id := r.PathValue("id")
	if err := s.cfg.Finetunes.Delete(r.Context(), p.Tenant, id); err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	writeJSON(w, http.StatusOK, success(map[string]string{"id": id}))
}

// maxMultipartOverhead is what an upload's body may hold besides its
// file: the part headers and the file_name field.
const maxMultipartOverhead = 64 << 10

// handleFinetuneUpload serves POST .../ai/finetunes/{id}/finetune-assets:
// a multipart body with file_name and file, as Workers AI takes it. The
// file is checked as an adapter (models/lora) before it is stored: a GGUF
// adapter alone, PEFT's pair once both are there.
func (s *Server) handleFinetuneUpload(w http.ResponseWriter, r *http.Request) {
	p, err := s.authenticate(r, auth.ScopeFinetunesWrite)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	select {
	case s.uploads <- struct{}{}:
		defer func() { <-s.uploads }()
	default:
		writeNativeError(w, s.refuse(r, retryIn(newError(rowCapacity, "Too many adapter uploads in progress on this edge, please retry", ErrUploadsBusy), time.Second)))
		return
	}
	// The body may take longer than other requests' (HTTPLimits.BodyReadTimeout).
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.UploadTimeout))
	ctx, id := r.Context(), r.PathValue("id")
	f, err := s.cfg.Finetunes.Get(ctx, p.Tenant, "", id)
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	name, data, err := readUpload(w, r)
	if err == nil {
		err = s.checkAdapter(ctx, p.Tenant, &f, name, data)
	}
	if err == nil {
		f, err = s.cfg.Finetunes.PutFile(ctx, p.Tenant, f.ID, name, data)
	}
	if err != nil {
		writeNativeError(w, s.refuse(r, err))
		return
	}
	writeJSON(w, http.StatusOK, success(f))
}

// readUpload reads an upload's multipart body: the file (at most
// queue.MaxAdapterFileBytes) and its name (the file_name field, else the
// file part's file name).
func readUpload(w http.ResponseWriter, r *http.Request) (string, []byte, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "multipart/form-data" {
		return "", nil, &InputError{Msg: "the body must be multipart/form-data with file_name and file"}
	}
	r.Body = http.MaxBytesReader(w, r.Body, queue.MaxAdapterFileBytes+maxMultipartOverhead)
	mr, err := r.MultipartReader()
	if err != nil {
		return "", nil, &InputError{Msg: err.Error()}
	}
	var name, fileName string
	var data []byte
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, uploadError(err)
		}
		switch part.FormName() {
		case "file_name":
			b, err := io.ReadAll(io.LimitReader(part, 256))
			if err != nil {
				return "", nil, uploadError(err)
			}
			name = strings.TrimSpace(string(b))
		case "file":
			fileName = part.FileName()
			if data, err = io.ReadAll(io.LimitReader(part, queue.MaxAdapterFileBytes+1)); err != nil {
				return "", nil, uploadError(err)
			}
			if len(data) > queue.MaxAdapterFileBytes {
				return "", nil, fmt.Errorf("%w: the file exceeds %d bytes", queue.ErrAdapterTooLarge, queue.MaxAdapterFileBytes)
			}
		}
	}
	if name == "" {
		name = fileName
	}
	switch {
	case data == nil:
		return "", nil, &InputError{Field: "file", Msg: "is required"}
	case !queue.ValidAdapterFile(name):
		return "", nil, &InputError{Field: "file_name", Msg: fmt.Sprintf("%q: want %s, %s or a .gguf file", name, queue.PEFTModelFile, queue.PEFTConfigFile)}
	}
	return name, data, nil
}

// uploadError is the refusal of a multipart body that broke off: too
// large (the MaxBytesReader's error, kept), or malformed.
func uploadError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fmt.Errorf("%w: the body exceeds %d bytes", queue.ErrAdapterTooLarge, mbe.Limit)
	}
	return &InputError{Msg: "malformed multipart body: " + err.Error()}
}

// checkAdapter validates an uploaded file as part of f's adapter: a GGUF
// adapter on its own; PEFT's config or weights together with the other
// file once f holds it (its config alone only as a JSON object). The
// adapter's rank and targets are lora's to check, its architecture must be
// the base model's where both are known.
func (s *Server) checkAdapter(ctx context.Context, tenant string, f *queue.Finetune, name string, data []byte) error {
	var a *lora.Adapter
	var err error
	switch name {
	case queue.PEFTConfigFile, queue.PEFTModelFile:
		other := queue.PEFTModelFile
		if name == queue.PEFTModelFile {
			other = queue.PEFTConfigFile
		}
		held := f.File(other)
		if held == nil {
			if name == queue.PEFTConfigFile && !isJSONObject(data) {
				return fmt.Errorf("%w: %s is not a JSON object", lora.ErrNotAdapter, name)
			}
			return nil // checked with the other file
		}
		b, rerr := s.cfg.Finetunes.ReadFile(ctx, tenant, f.ID, *held)
		if rerr != nil {
			return rerr
		}
		if name == queue.PEFTModelFile {
			a, err = lora.ParsePEFT(data, b)
		} else {
			a, err = lora.ParsePEFT(b, data)
		}
	default:
		a, err = lora.ParseGGUF(data)
	}
	if err != nil {
		return err
	}
	if m, ok := s.cfg.Catalog.Lookup(f.Model); ok && m.Arch != "" && a.Arch != "" && !strings.EqualFold(m.Arch, a.Arch) {
		return fmt.Errorf("%w: the adapter is for %s, the model %s is %s", lora.ErrBadAdapter, a.Arch, m.Name, m.Arch)
	}
	return nil
}

func isJSONObject(b []byte) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(b, &v) == nil
}

// resolveLoRA sets in.adapter to the caller's finetune of m that in.lora
// names (by name or id). It reads the caller's own finetunes only: another
// tenant's name or id is the same queue.ErrFinetuneNotFound, from the same
// lookup, as a name nobody uses.
func (s *Server) resolveLoRA(ctx context.Context, p auth.Principal, m *catalog.Model, in *genInput) error {
	if in.lora == "" {
		return nil
	}
	if s.cfg.Finetunes == nil {
		return ErrNoFinetunes
	}
	f, err := s.cfg.Finetunes.Get(ctx, p.Tenant, m.Name, in.lora)
	if err != nil {
		return err
	}
	if !f.Ready() {
		return &InputError{Field: "lora", Msg: fmt.Sprintf("finetune %q has no complete adapter yet: upload %s and %s, or one .gguf file",
			f.Name, queue.PEFTModelFile, queue.PEFTConfigFile)}
	}
	in.adapter = f.Ref()
	return nil
}
