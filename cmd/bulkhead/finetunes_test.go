package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
)

// scopedToken mints a token of tenant with scopes.
func (d *devServer) scopedToken(t *testing.T, tenant string, scopes ...string) string {
	t.Helper()
	tok, err := d.key.Mint(tenant, scopes, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestFinetunesCLI drives `bulkhead finetunes` against dev (on its
// authenticated bus: the edge role's permissions on the finetunes bucket
// and the adapters object store): create, upload, list, a refused upload
// with its code, a request naming the finetune before it holds an
// adapter, another tenant's view, and delete.
func TestFinetunesCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dev")
	}
	d := startDev(t, "--threads", "1")
	edgeURL := "http://" + d.addr
	tok := d.scopedToken(t, "acme", auth.ScopeFinetunesWrite, auth.ScopeRun)
	other := d.scopedToken(t, "other", auth.ScopeFinetunesWrite, auth.ScopeRun)
	cli := func(token string, args ...string) (string, string, int) {
		t.Helper()
		return bulkhead(t, append(append([]string{"finetunes"}, args...), "--edge", edgeURL, "--token", token)...)
	}
	out, errOut, code := cli(tok, "create", "--name", "poet", "--model", builtin.Name, "--description", "rhymes", "--json")
	var ft struct {
		ID    string `json:"id"`
		Files []struct {
			Name string `json:"name"`
		} `json:"files"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &ft) != nil || ft.ID == "" {
		t.Fatalf("create: %d %q %s", code, out, errOut)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "adapter_config.json")
	bad := filepath.Join(dir, "adapter.gguf")
	if err := os.WriteFile(config, []byte(`{"r":8,"lora_alpha":16,"target_modules":["q_proj","v_proj"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("not a GGUF file at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code = cli(tok, "upload", "--id", "poet", "--file", config, "--json"); code != 0 || !strings.Contains(out, "adapter_config.json") {
		t.Fatalf("upload config: %d %q %s", code, out, errOut)
	}
	if _, errOut, code = cli(tok, "upload", "--id", ft.ID, "--file", bad); code != 1 || !strings.Contains(errOut, "code 3056") {
		t.Fatalf("upload a non-adapter: exit %d %s; want 1 naming code 3056", code, errOut)
	}
	if out, errOut, code = cli(tok, "list"); code != 0 || !strings.Contains(out, ft.ID) || !strings.Contains(out, "poet") {
		t.Fatalf("list: %d %q %s", code, out, errOut)
	}
	status, body := post(t, tok, edgeURL+"/ai/run/"+builtin.Name, `{"prompt":"Once","max_tokens":4,"lora":"poet"}`)
	if status != 400 || !strings.Contains(string(body), "no complete adapter") {
		t.Fatalf("a finetune without its adapter: %d %s", status, body)
	}
	if out, errOut, code = cli(other, "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("another tenant's list: %d %q %s", code, out, errOut)
	}
	if _, errOut, code = cli(other, "delete", "--id", ft.ID); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("another tenant's delete: %d %s", code, errOut)
	}
	if out, errOut, code = cli(tok, "delete", "--id", ft.ID); code != 0 {
		t.Fatalf("delete: %d %q %s", code, out, errOut)
	}
	if out, errOut, code = cli(tok, "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %d %q %s", code, out, errOut)
	}
}
