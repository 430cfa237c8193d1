package store

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
)

// DefaultHFEndpoint is Hugging Face's hub; HF_ENDPOINT overrides it in cmd.
const DefaultHFEndpoint = "https://huggingface.co"

// Source is a parsed pull source.
type Source struct {
	Raw  string // as given
	URL  string // what is fetched
	Name string // the default model name (see DefaultName)

	// Set for hf: sources.
	Owner, Repo, File, Revision string
}

// ParseSource reads a pull source: an https:// URL (http:// only to loopback
// hosts), or hf:OWNER/REPO/FILE.gguf[@REVISION], fetched from endpoint's
// resolve URL (endpoint "" is DefaultHFEndpoint). FILE may hold folders;
// REVISION defaults to "main". Errors wrap ErrSource.
func ParseSource(raw, endpoint string) (Source, error) {
	bad := func(format string, a ...any) (Source, error) {
		return Source{}, fmt.Errorf("%w: %q: %s", ErrSource, raw, fmt.Sprintf(format, a...))
	}
	if raw == "" {
		return bad("empty")
	}
	if strings.ContainsAny(raw, " \t\r\n\x00") {
		return bad("holds whitespace or control characters")
	}
	if rest, ok := strings.CutPrefix(raw, "hf:"); ok {
		return parseHF(raw, rest, endpoint)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", err)
	}
	if err := checkURL(u); err != nil {
		return Source{}, fmt.Errorf("%w: %q: %w", ErrSource, raw, err)
	}
	base := path.Base(u.Path)
	if u.Path == "" || base == "/" || base == "." {
		return bad("the URL names no file")
	}
	s := Source{Raw: raw, URL: u.String()}
	s.Name = DefaultName(s)
	return s, nil
}

func parseHF(raw, rest, endpoint string) (Source, error) {
	bad := func(format string, a ...any) (Source, error) {
		return Source{}, fmt.Errorf("%w: %q: %s (want hf:OWNER/REPO/FILE.gguf[@REVISION])", ErrSource, raw, fmt.Sprintf(format, a...))
	}
	s := Source{Raw: raw, Revision: "main"}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 && strings.HasSuffix(strings.ToLower(rest[:i]), ".gguf") {
		rest, s.Revision = rest[:i], rest[i+1:]
		if s.Revision == "" {
			return bad("the revision after @ is empty")
		}
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 3 {
		return bad("too few parts")
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return bad("empty, . or .. path part")
		}
	}
	for _, p := range parts[:2] {
		if strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
			return bad("%q: owner and repository are letters, digits, '.', '_' and '-'", p)
		}
	}
	s.Owner, s.Repo, s.File = parts[0], parts[1], strings.Join(parts[2:], "/")
	if !strings.HasSuffix(strings.ToLower(s.File), ".gguf") {
		return bad("%q is not a .gguf file", s.File)
	}
	if endpoint == "" {
		endpoint = DefaultHFEndpoint
	}
	eu, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil || eu.Host == "" || eu.RawQuery != "" || eu.Fragment != "" {
		return Source{}, fmt.Errorf("%w: Hugging Face endpoint %q is not a URL", ErrSource, endpoint)
	}
	if err := checkURL(eu); err != nil {
		return Source{}, fmt.Errorf("%w: Hugging Face endpoint %q: %w", ErrSource, endpoint, err)
	}
	file := make([]string, 0, len(parts)-2)
	for _, p := range parts[2:] {
		file = append(file, url.PathEscape(p))
	}
	s.URL = eu.String() + "/" + s.Owner + "/" + s.Repo + "/resolve/" + url.PathEscape(s.Revision) + "/" + strings.Join(file, "/")
	s.Name = DefaultName(s)
	return s, nil
}

// DefaultName is the model name a pull registers when none is given, lower
// case throughout and without the .gguf extension:
//
//	hf:OWNER/REPO/PATH.gguf[@REV]  ->  @hf/owner/repo/path
//	https://host/dir/FILE.gguf     ->  file
//
// The revision is not part of the name. It returns "" when the source names
// no usable file.
func DefaultName(s Source) string {
	var n string
	if s.Owner != "" {
		n = "@hf/" + s.Owner + "/" + s.Repo + "/" + s.File
	} else {
		u, err := url.Parse(s.URL)
		if err != nil {
			return ""
		}
		n = path.Base(u.Path)
		if un, err := url.PathUnescape(n); err == nil {
			n = un
		}
	}
	n = strings.ToLower(n)
	n = strings.TrimSuffix(n, ".gguf")
	if n == "" || n == "/" || n == "." || strings.HasSuffix(n, "/") {
		return ""
	}
	return n
}

// checkURL enforces the transport policy on a URL: https anywhere, http only
// to a loopback host, nothing else, and no credentials in the URL.
func checkURL(u *url.URL) error {
	if u.User != nil {
		return fmt.Errorf("%w: credentials in the URL are refused", ErrInsecure)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return fmt.Errorf("%w: plain http:// to %s (only https, or http to a loopback host)", ErrInsecure, u.Host)
		}
	default:
		return fmt.Errorf("%w: scheme %q (want https://)", ErrInsecure, u.Scheme)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: the URL has no host", ErrInsecure)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
