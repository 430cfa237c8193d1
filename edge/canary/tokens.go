package canary

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/bulkhead-ai/bulkhead/edge/client"
)

// ErrTokenFile marks a canary token file that is not `tenant token` lines.
var ErrTokenFile = errors.New("want `tenant token` lines")

// maxTokenLine bounds one line of a token file.
const maxTokenLine = 64 << 10

// LoadTenants reads the canary tenants from a token file (one `tenant token`
// line per tenant; blank lines and lines starting with # are skipped) and
// gives each a client of the edge at edgeURL holding its token. A malformed
// line is ErrTokenFile, naming the file.
func LoadTenants(path, edgeURL string) ([]Tenant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadTenants(f, path, edgeURL)
}

// ReadTenants is LoadTenants on an open reader; name is how errors call it.
func ReadTenants(r io.Reader, name, edgeURL string) ([]Tenant, error) {
	var out []Tenant
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, maxTokenLine), maxTokenLine)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s: %w", name, ErrTokenFile)
		}
		out = append(out, Tenant{ID: fields[0], Client: client.New(edgeURL, fields[1])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
