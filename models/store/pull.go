package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/gguf"
)

// PullOptions are one pull's choices.
type PullOptions struct {
	Name   string // the model name; "" is the source's DefaultName
	SHA256 string // expected sha256 in hex; "" trusts the published one, if any
	// Force replaces a model registered under the same name from another
	// source, and downloads again one already present.
	Force bool
	// Progress, when set, is called from Pull's goroutine as bytes arrive.
	Progress func(Progress)
}

// Progress reports a transfer.
type Progress struct {
	Name    string
	Done    int64 // bytes in the partial file, resumed ones included
	Total   int64 // the file's size; -1 when the server does not say
	Resumed int64 // bytes that were already there when this transfer began
}

// Result is what a pull registered.
type Result struct {
	Entry
	Path     string // the file's absolute path
	Resumed  int64  // bytes taken from an earlier interrupted pull
	Present  bool   // already registered from the same source; nothing was downloaded
	Verified string // "given", "published", "given+published" or "" (no checksum to check)
}

// partialMeta is kept beside a partial file so that a resume asks for the
// same entity.
type partialMeta struct {
	URL       string `json:"url"`
	Validator string `json:"validator,omitempty"` // ETag or Last-Modified, for If-Range
	Total     int64  `json:"total"`
	SHA256    string `json:"sha256,omitempty"` // published
}

var errStalled = errors.New("no data arrived within the stall timeout")

// locksDir holds one lock file per model file, taken while a pull writes it.
const locksDir = ".locks"

// Pull downloads source into the model directory and registers it. See the
// package documentation for the checks. An interrupted transfer (a dropped
// connection, a stall, ctx ending) keeps its partial file and wraps
// ErrInterrupted; pulling again resumes it. Every other failure removes the
// partial file. Nothing is ever left under the model's final name by a
// failed pull, and the index is changed only by a pull that succeeds.
func (s *Store) Pull(ctx context.Context, source string, opt PullOptions) (Result, error) {
	src, err := ParseSource(source, s.cfg.HFEndpoint)
	if err != nil {
		return Result{}, err
	}
	name := opt.Name
	if name == "" {
		if name = src.Name; name == "" {
			return Result{}, fmt.Errorf("%w: no name can be derived from %q; give one", ErrName, source)
		}
	}
	if err := checkName(name); err != nil {
		return Result{}, err
	}
	want := strings.ToLower(strings.TrimSpace(opt.SHA256))
	if opt.SHA256 != "" && !isSHA256(want) {
		return Result{}, fmt.Errorf("%w: the expected sha256 %q is not 64 hex digits", ErrChecksum, opt.SHA256)
	}
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("store: model directory: %w", err)
	}
	file := fileName(name)
	final := filepath.Join(s.cfg.Dir, file)
	if err := os.MkdirAll(filepath.Join(s.cfg.Dir, locksDir), 0o755); err != nil {
		return Result{}, fmt.Errorf("store: model directory: %w", err)
	}
	unlock, err := lockFile(filepath.Join(s.cfg.Dir, locksDir, file+".lock"), false)
	if err != nil {
		return Result{}, fmt.Errorf("model %q: %w", name, err)
	}
	defer unlock()

	if r, done, err := s.existing(name, src, want, opt.Force); done || err != nil {
		return r, err
	}
	p := &pull{s: s, src: src, name: name, want: want, progress: opt.Progress,
		partial: final + ".partial", meta: final + ".partial.json"}
	res, err := p.run(ctx)
	if err != nil {
		if !errors.Is(err, ErrInterrupted) {
			p.discard()
		}
		return Result{}, fmt.Errorf("pull %s: %w", source, err)
	}
	if err := os.Rename(p.partial, final); err != nil {
		p.discard()
		return Result{}, fmt.Errorf("store: %w", err)
	}
	_ = os.Remove(p.meta)
	if err := syncDir(s.cfg.Dir); err != nil {
		_ = os.Remove(final)
		return Result{}, fmt.Errorf("store: %w", err)
	}
	e := Entry{Name: name, File: file, SHA256: res.sum, Source: src.Raw, URL: src.URL, Size: res.size, PulledAt: time.Now().UTC().Truncate(time.Second)}
	var stale string
	err = s.update(func(idx *index) error {
		for i, old := range idx.Models {
			if old.Name == name {
				if old.File != file {
					stale = old.File
				}
				idx.Models = append(idx.Models[:i], idx.Models[i+1:]...)
				break
			}
		}
		idx.Models = append(idx.Models, e)
		return nil
	})
	if err != nil {
		_ = os.Remove(final)
		return Result{}, err
	}
	if stale != "" {
		_ = os.Remove(filepath.Join(s.cfg.Dir, stale))
	}
	return Result{Entry: e, Path: final, Resumed: res.resumed, Verified: res.verified}, nil
}

// existing decides what to do with a name already registered: the same
// source with its file in place is done (Present) unless force; another
// source is ErrExists unless force.
func (s *Store) existing(name string, src Source, want string, force bool) (Result, bool, error) {
	idx, err := s.readIndex()
	if err != nil {
		return Result{}, false, err
	}
	for _, e := range idx.Models {
		if e.Name != name {
			continue
		}
		if force {
			return Result{}, false, nil
		}
		if e.URL != src.URL {
			return Result{}, false, fmt.Errorf("%w: %q is registered from %s; give another name, or force to replace it", ErrExists, name, e.Source)
		}
		if want != "" && want != e.SHA256 {
			return Result{}, false, fmt.Errorf("%w: %q is registered with sha256 %s, not %s; force to download it again", ErrExists, name, e.SHA256, want)
		}
		path := filepath.Join(s.cfg.Dir, e.File)
		if st, err := os.Stat(path); err == nil && st.Size() == e.Size {
			return Result{Entry: e, Path: path, Present: true}, true, nil
		}
		return Result{}, false, nil // registered but the file is gone or changed: pull again
	}
	return Result{}, false, nil
}

// pull is one download into a partial file.
type pull struct {
	s             *Store
	src           Source
	name, want    string
	progress      func(Progress)
	partial, meta string
}

type pulled struct {
	sum, verified string
	size, resumed int64
}

func (p *pull) discard() {
	_ = os.Remove(p.partial)
	_ = os.Remove(p.meta)
}

// run downloads until the partial file is complete and verified. A resume
// the server cannot honour (wrong range, 416 short of the end, a changed
// validator) starts over once from byte 0.
func (p *pull) run(ctx context.Context) (pulled, error) {
	for attempt := 0; ; attempt++ {
		res, restart, err := p.attempt(ctx, attempt > 0)
		if restart && attempt == 0 {
			p.discard()
			continue
		}
		if restart {
			return pulled{}, fmt.Errorf("%w: the server did not honour a download from the start", ErrHTTP)
		}
		return res, err
	}
}

// attempt is one request of a pull: the partial file it appends to and
// what it learns of the file from the server.
type attempt struct {
	p         *pull
	f         *os.File
	meta      partialMeta // the partial file's sidecar, as read and then as rewritten
	sum       hash.Hash   // of the partial file's bytes so far
	offset    int64       // bytes in the partial file
	resumed   int64       // bytes that were there before this request
	total     int64       // the file's size; -1 while unknown
	published string      // the sha256 the server publishes, if any
	validator string      // the response's strong validator, for If-Range
	stall     *time.Timer // cancels the request when no byte came for StallTimeout
}

// attempt makes one request. restart asks run to discard the partial file and
// try again from byte 0.
func (p *pull) attempt(ctx context.Context, fresh bool) (res pulled, restart bool, err error) {
	a := &attempt{p: p, total: -1, sum: sha256.New()}
	restart, err = a.open(fresh)
	if a.f != nil {
		defer a.f.Close()
	}
	if restart || err != nil {
		return res, restart, err
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.stall = time.AfterFunc(p.s.cfg.StallTimeout, func() { cancel(errStalled) })
	defer a.stall.Stop()

	resp, h, err := a.request(actx)
	if err != nil {
		return res, false, err
	}
	defer resp.Body.Close()
	if restart, err := a.size(resp, h); restart || err != nil {
		return res, restart, err
	}
	a.meta = partialMeta{URL: p.src.URL, Validator: a.validator, Total: a.total, SHA256: a.published}
	if data, err := json.Marshal(a.meta); err == nil {
		if err := writeAtomic(p.meta, data); err != nil {
			return res, false, fmt.Errorf("store: %w", err)
		}
	}
	a.resumed = a.offset
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		if err := a.copy(actx, resp); err != nil {
			return res, false, err
		}
	}
	res, err = a.finish()
	return res, false, err
}

// open opens the partial file and hashes what it holds; a fresh attempt,
// another URL's or a too-short partial file starts from byte 0. It asks for
// a restart when the bytes there are not a GGUF file's start.
func (a *attempt) open(fresh bool) (restart bool, err error) {
	p := a.p
	if data, err := os.ReadFile(p.meta); err == nil {
		_ = json.Unmarshal(data, &a.meta)
	}
	if a.f, err = os.OpenFile(p.partial, os.O_RDWR|os.O_CREATE, 0o644); err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	st, err := a.f.Stat()
	if err != nil {
		return false, fmt.Errorf("store: %w", err)
	}
	a.offset = st.Size()
	if a.offset > 0 && (fresh || a.meta.URL != p.src.URL || a.offset < sniffLen) {
		if err := a.f.Truncate(0); err != nil {
			return false, fmt.Errorf("store: %w", err)
		}
		a.offset, a.meta = 0, partialMeta{}
	}
	if a.offset == 0 {
		return false, nil
	}
	head := make([]byte, sniffLen)
	if _, err := io.ReadFull(io.NewSectionReader(a.f, 0, sniffLen), head); err != nil {
		return true, nil
	}
	if sniff(head, "") != nil {
		return true, nil
	}
	if _, err := io.Copy(a.sum, io.NewSectionReader(a.f, 0, a.offset)); err != nil {
		return false, fmt.Errorf("store: reading %s: %w", p.partial, err)
	}
	return false, nil
}

// request sends the GET, asking for the rest of a partial file, and checks
// the checksum the server publishes against the one expected.
func (a *attempt) request(ctx context.Context) (*http.Response, hops, error) {
	hdr := http.Header{}
	hdr.Set("User-Agent", "bulkhead-models-pull")
	hdr.Set("Accept-Encoding", "identity") // a transparent gzip would hide the length and break ranges
	if a.offset > 0 {
		hdr.Set("Range", fmt.Sprintf("bytes=%d-", a.offset))
		if a.meta.Validator != "" {
			hdr.Set("If-Range", a.meta.Validator)
		}
	}
	resp, h, err := a.p.s.get(ctx, a.p.src.URL, hdr)
	if err != nil {
		return nil, h, err
	}
	a.published = h.sha256
	if a.published == "" && a.offset > 0 {
		a.published = a.meta.SHA256
	}
	if a.p.want != "" && a.published != "" && a.p.want != a.published {
		resp.Body.Close()
		return nil, h, fmt.Errorf("%w: the server publishes sha256 %s for this file, not the %s expected", ErrChecksum, a.published, a.p.want)
	}
	a.validator = resp.Header.Get("ETag")
	if strings.HasPrefix(a.validator, "W/") {
		a.validator = "" // If-Range takes only a strong validator
	}
	if a.validator == "" {
		a.validator = resp.Header.Get("Last-Modified")
	}
	return resp, h, nil
}

// size reads the response's status and the file's size from it: the whole
// file (the partial one starts over), the rest of it, or nothing more (the
// partial file is whole). It asks for a restart when the answer does not
// continue the partial file.
func (a *attempt) size(resp *http.Response, h hops) (restart bool, err error) {
	switch resp.StatusCode {
	case http.StatusOK:
		if a.offset > 0 { // the server ignored Range, or If-Range saw a changed file
			if err := a.f.Truncate(0); err != nil {
				return false, fmt.Errorf("store: %w", err)
			}
			a.offset = 0
			a.sum.Reset()
		}
		a.total = resp.ContentLength
	case http.StatusPartialContent:
		first, last, tot, err := contentRange(resp.Header.Get("Content-Range"))
		if err != nil {
			return false, err
		}
		if first != a.offset || (resp.ContentLength >= 0 && resp.ContentLength != last-first+1) {
			return true, nil
		}
		if a.meta.Validator != "" && a.validator != "" && a.validator != a.meta.Validator {
			return true, nil // the file changed and If-Range was ignored
		}
		a.total = tot
		if tot < 0 {
			a.total = a.meta.Total
		}
	case http.StatusRequestedRangeNotSatisfiable:
		_, _, tot, err := contentRange(resp.Header.Get("Content-Range"))
		if a.offset == 0 || err != nil || tot != a.offset {
			return true, nil
		}
		a.total = tot // the partial file is already whole
	default:
		return false, statusError(resp, h.url, a.p.src.Owner != "")
	}
	if h.size >= 0 {
		if a.total >= 0 && a.total != h.size {
			return false, fmt.Errorf("%w: the server says %d bytes but publishes a size of %d", ErrSize, a.total, h.size)
		}
		a.total = h.size
	}
	if a.total > a.p.s.cfg.MaxBytes {
		return false, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, a.total, a.p.s.cfg.MaxBytes)
	}
	return a.total >= 0 && a.offset > a.total, nil
}

// finish checks the complete partial file: its size, its checksum against
// the expected and the published ones, and its GGUF structure.
func (a *attempt) finish() (pulled, error) {
	p := a.p
	if a.total >= 0 && a.offset != a.total {
		return pulled{}, fmt.Errorf("%w: %d of %d bytes arrived (run the same pull again to resume)", ErrInterrupted, a.offset, a.total)
	}
	if err := a.f.Sync(); err != nil {
		return pulled{}, fmt.Errorf("store: %w", err)
	}
	if err := a.f.Close(); err != nil {
		return pulled{}, fmt.Errorf("store: %w", err)
	}
	res := pulled{sum: hex.EncodeToString(a.sum.Sum(nil)), size: a.offset, resumed: a.resumed}
	if p.want != "" && res.sum != p.want {
		return res, fmt.Errorf("%w: the file's sha256 is %s, not the %s given", ErrChecksum, res.sum, p.want)
	}
	if a.published != "" && res.sum != a.published {
		return res, fmt.Errorf("%w: the file's sha256 is %s, not the %s the server publishes", ErrChecksum, res.sum, a.published)
	}
	switch {
	case p.want != "" && a.published != "":
		res.verified = "given+published"
	case p.want != "":
		res.verified = "given"
	case a.published != "":
		res.verified = "published"
	}
	if err := validate(p.partial); err != nil {
		return res, err
	}
	return res, nil
}

// copy streams the body into the partial file from a.offset, hashing and
// reporting progress. The first bytes of a file are sniffed before anything
// is written.
func (a *attempt) copy(ctx context.Context, resp *http.Response) error {
	p, f, total := a.p, a.f, a.total
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	limit := p.s.cfg.MaxBytes
	if total >= 0 {
		limit = total
	}
	body := resp.Body
	readErr := func(err error) error {
		if ctx.Err() != nil {
			return ctxErr(ctx)
		}
		of := ""
		if total >= 0 {
			of = fmt.Sprintf(" of %d", total)
		}
		return fmt.Errorf("%w: after %d%s bytes: %w (run the same pull again to resume)", ErrInterrupted, a.offset, of, err)
	}
	if a.offset == 0 {
		head := make([]byte, sniffLen)
		n, err := io.ReadFull(body, head)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return readErr(err)
		}
		if err := sniff(head[:n], resp.Header.Get("Content-Type")); err != nil {
			return err
		}
		if _, err := f.Write(head); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		a.sum.Write(head)
		a.offset = sniffLen
	}
	w := io.MultiWriter(f, a.sum)
	buf := make([]byte, 1<<20)
	report := func() {
		if p.progress != nil {
			p.progress(Progress{Name: p.name, Done: a.offset, Total: total, Resumed: a.resumed})
		}
	}
	report()
	for {
		n, err := body.Read(buf)
		if n > 0 {
			a.stall.Reset(p.s.cfg.StallTimeout)
			if int64(n) > limit-a.offset {
				if total >= 0 {
					return fmt.Errorf("%w: the server sent more than the %d bytes it announced", ErrSize, total)
				}
				return fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("store: %w", werr)
			}
			a.offset += int64(n)
			report()
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return readErr(err)
		}
	}
}

// statusError explains an unusable status.
func statusError(resp *http.Response, u string, hf bool) error {
	hint := ""
	switch {
	case !hf:
	case resp.StatusCode == http.StatusNotFound:
		hint = " (check the owner, repository, file name and revision)"
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusForbidden:
		hint = " (the repository may be gated or private; pulls send no token)"
	}
	drain(resp)
	return fmt.Errorf("%w: %s answered %s%s", ErrHTTP, u, resp.Status, hint)
}

// validate opens the finished file with models/gguf, which checks every count
// and offset against the file size, and requires what serving needs: an
// architecture and its trained context.
func validate(path string) error {
	f, err := gguf.Open(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	defer f.Close()
	info := describe(f)
	if info.Arch == "" {
		return fmt.Errorf("%w: metadata general.architecture is missing", ErrInvalid)
	}
	if info.Context == 0 {
		return fmt.Errorf("%w: metadata %s.context_length is missing", ErrInvalid, info.Arch)
	}
	if len(f.Tensors) == 0 {
		return fmt.Errorf("%w: the file holds no tensors", ErrInvalid)
	}
	return nil
}
