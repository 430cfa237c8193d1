package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/catalog"
)

// Sentinel errors. Every error from a pull or a lookup wraps one of them (or
// context.Canceled / context.DeadlineExceeded when the caller gave up).
var (
	ErrSource      = errors.New("store: bad source")
	ErrInsecure    = errors.New("store: insecure or unsupported URL")
	ErrName        = errors.New("store: bad model name")
	ErrExists      = errors.New("store: model name already registered")
	ErrNotFound    = errors.New("store: model not in the model directory")
	ErrHTTP        = errors.New("store: download failed")
	ErrRedirects   = errors.New("store: too many redirects")
	ErrNotGGUF     = errors.New("store: not a GGUF file")
	ErrInvalid     = errors.New("store: invalid GGUF file")
	ErrChecksum    = errors.New("store: sha256 mismatch")
	ErrSize        = errors.New("store: size mismatch")
	ErrTooLarge    = errors.New("store: file too large")
	ErrInterrupted = errors.New("store: transfer interrupted")
	ErrBusy        = errors.New("store: another pull of this model is running")
	ErrIndex       = errors.New("store: bad index file")
	ErrConfig      = errors.New("store: bad config")
)

// IndexFile is the registry's file name inside the model directory.
const IndexFile = "index.json"

// Defaults for zero Config fields.
const (
	DefaultMaxRedirects = 10
	DefaultMaxBytes     = 1 << 40 // 1 TiB
	DefaultStallTimeout = 60 * time.Second
)

// Config configures a Store. Zero values take the defaults above.
type Config struct {
	Dir          string        // the model directory (required); created on first pull
	HFEndpoint   string        // hf: sources' endpoint ("" = DefaultHFEndpoint)
	MaxRedirects int           // redirect hops followed per request
	MaxBytes     int64         // largest file accepted
	StallTimeout time.Duration // a transfer that moves no byte for this long fails (resumable)
}

// Store is one model directory. Its methods may be called concurrently, also
// from several processes: the index is updated under a lock file and each
// model's partial file is locked while a pull writes it.
type Store struct {
	client *http.Client
	cfg    Config
}

// New returns a Store for cfg.Dir. client makes the requests (nil: a client
// with http.DefaultTransport); its redirect policy is replaced by the store's
// own, which applies the URL policy and the bound to every hop.
func New(client *http.Client, cfg Config) (*Store, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: Dir is empty", ErrConfig)
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: Dir %q: %w", ErrConfig, cfg.Dir, err)
	}
	cfg.Dir = abs
	switch {
	case cfg.MaxRedirects < 0:
		return nil, fmt.Errorf("%w: MaxRedirects %d is negative", ErrConfig, cfg.MaxRedirects)
	case cfg.MaxRedirects == 0:
		cfg.MaxRedirects = DefaultMaxRedirects
	}
	switch {
	case cfg.MaxBytes < 0:
		return nil, fmt.Errorf("%w: MaxBytes %d is negative", ErrConfig, cfg.MaxBytes)
	case cfg.MaxBytes == 0:
		cfg.MaxBytes = DefaultMaxBytes
	}
	switch {
	case cfg.StallTimeout < 0:
		return nil, fmt.Errorf("%w: StallTimeout %v is negative", ErrConfig, cfg.StallTimeout)
	case cfg.StallTimeout == 0:
		cfg.StallTimeout = DefaultStallTimeout
	}
	c := &http.Client{}
	if client != nil {
		*c = *client
	}
	c.Timeout = 0 // a large file takes as long as it takes; stalls are caught per read
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Store{client: c, cfg: cfg}, nil
}

// Dir returns the absolute model directory.
func (s *Store) Dir() string { return s.cfg.Dir }

// DefaultDir is $XDG_DATA_HOME/bulkhead/models, else
// ~/.local/share/bulkhead/models.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "bulkhead", "models"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no model directory: %w", ErrConfig, err)
	}
	return filepath.Join(home, ".local", "share", "bulkhead", "models"), nil
}

// Entry is one registered model.
type Entry struct {
	Name     string    `json:"name"`
	File     string    `json:"file"` // relative to the model directory
	SHA256   string    `json:"sha256"`
	Source   string    `json:"source"`
	URL      string    `json:"url"`
	Size     int64     `json:"size"`
	PulledAt time.Time `json:"pulled_at"`
}

// index is the layout of IndexFile.
type index struct {
	Version int     `json:"version"`
	Models  []Entry `json:"models"`
}

const indexVersion = 1

// maxIndexBytes bounds the index file read.
const maxIndexBytes = 16 << 20

// Lookup returns the entry named name and its file's absolute path. A name
// not registered is ErrNotFound; a registered name whose file is gone is
// ErrNotFound too, naming the path.
func (s *Store) Lookup(name string) (Entry, string, error) {
	idx, err := s.readIndex()
	if err != nil {
		return Entry{}, "", err
	}
	for _, e := range idx.Models {
		if e.Name == name {
			p := filepath.Join(s.cfg.Dir, e.File)
			if _, err := os.Stat(p); err != nil {
				return Entry{}, "", fmt.Errorf("%w: %q is registered but its file %s is gone (pull it again)", ErrNotFound, name, p)
			}
			return e, p, nil
		}
	}
	return Entry{}, "", fmt.Errorf("%w: %q is not in %s", ErrNotFound, name, s.cfg.Dir)
}

// Entries returns the registered models sorted by name.
func (s *Store) Entries() ([]Entry, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	sort.Slice(idx.Models, func(i, j int) bool { return idx.Models[i].Name < idx.Models[j].Name })
	return idx.Models, nil
}

// readIndex reads the index; a missing directory or file is an empty index.
func (s *Store) readIndex() (*index, error) {
	p := filepath.Join(s.cfg.Dir, IndexFile)
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return &index{Version: indexVersion}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrIndex, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIndexBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrIndex, p, err)
	}
	if len(data) > maxIndexBytes {
		return nil, fmt.Errorf("%w: %s is over %d bytes", ErrIndex, p, maxIndexBytes)
	}
	var idx index
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrIndex, p, err)
	}
	if idx.Version != indexVersion {
		return nil, fmt.Errorf("%w: %s: version %d (want %d)", ErrIndex, p, idx.Version, indexVersion)
	}
	for _, e := range idx.Models {
		if e.File == "" || e.File != filepath.Base(e.File) || e.File == "." || e.File == ".." {
			return nil, fmt.Errorf("%w: %s: model %q has file %q (want a file name in the directory)", ErrIndex, p, e.Name, e.File)
		}
	}
	return &idx, nil
}

// update runs fn on the index under the directory's lock and writes the
// result atomically.
func (s *Store) update(fn func(*index) error) error {
	unlock, err := lockFile(filepath.Join(s.cfg.Dir, ".lock"), true)
	if err != nil {
		return err
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if err := fn(idx); err != nil {
		return err
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIndex, err)
	}
	return writeAtomic(filepath.Join(s.cfg.Dir, IndexFile), append(data, '\n'))
}

// writeAtomic replaces path with data: temp file in the same directory,
// fsync, rename, fsync of the directory.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	name := tmp.Name()
	err = tmp.Chmod(0o644)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		_ = os.Remove(name)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// lockFile takes an exclusive flock on path (created if absent). wait false
// fails at once with ErrBusy when another holder has it.
func lockFile(path string, wait bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s is locked)", ErrBusy, path)
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// fileName is the file a model name is stored under: the name with every
// byte outside [A-Za-z0-9._-] replaced by '_', cut to 96 bytes, then '-' and
// 8 hex digits of the name's sha256 so that two names never share a file.
func fileName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < 96; i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '-', c == '_':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimLeft(b.String(), ".") + "-" + hex.EncodeToString(sum[:4]) + ".gguf"
}

// checkName applies the catalog's name rules, so that a name the catalog
// would refuse is refused at pull time, and refuses '=', where the
// --model NAME=PATH flag splits.
func checkName(name string) error {
	if err := catalog.CheckName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrName, err)
	}
	if strings.Contains(name, "=") {
		return fmt.Errorf("%w: %q holds '=' (a --model flag could not name it)", ErrName, name)
	}
	return nil
}
