package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// generated is `bulkhead generate --json`'s answer.
type generated struct {
	CompletionTokens []int32 `json:"completion_tokens"`
	Text             string  `json:"text"`
}

// TestLoRAEndToEnd: an adapter written by `bulkhead models synth --lora`
// for the built-in model, uploaded with `bulkhead finetunes`, changes dev's
// greedy answer to exactly what `bulkhead generate --lora` gives (text and
// token count), on the native API and OpenAI's "<model>:<finetune>", and
// on dev --disaggregated (the prefill worker hands over KV computed under
// the adapter; the decode worker checks the manifest's adapter key);
// without lora the answer is the base model's.
func TestLoRAEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts dev twice")
	}
	dir := t.TempDir()
	base, err := builtin.WriteTo(dir)
	if err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(dir, "adapter.gguf")
	if _, errOut, code := bulkhead(t, "models", "synth", "--lora", "8", "--base", base, "--targets", "all", "--seed", "7", "--out", adapter); code != 0 {
		t.Fatalf("models synth --lora: %d %s", code, errOut)
	}
	const prompt, n = "Once upon a time", 24
	gen := func(extra ...string) generated {
		t.Helper()
		out, errOut, code := bulkhead(t, append([]string{"generate", "--model", base, "--prompt", prompt, "--max-tokens", fmt.Sprint(n),
			"--temperature", "0", "--threads", "1", "--json"}, extra...)...)
		var g generated
		if code != 0 || json.Unmarshal([]byte(out), &g) != nil {
			t.Fatalf("generate %v: %d %s", extra, code, errOut)
		}
		return g
	}
	plain, tuned := gen(), gen("--lora", adapter)
	if plain.Text == tuned.Text {
		t.Fatalf("the adapter changed nothing: %q", plain.Text)
	}
	for _, args := range [][]string{{"--threads", "1"}, {"--threads", "1", "--disaggregated", "--prefill-workers", "1", "--decode-workers", "1"}} {
		d := startDev(t, args...)
		edgeURL := "http://" + d.addr
		tok := d.scopedToken(t, "acme", auth.ScopeFinetunesWrite, auth.ScopeRun)
		_, errOut, code := bulkhead(t, "finetunes", "create", "--edge", edgeURL, "--token", tok, "--name", "poet", "--model", builtin.Name, "--json")
		if code != 0 {
			t.Fatalf("create: %d %s", code, errOut)
		}
		if out, errOut, code := bulkhead(t, "finetunes", "upload", "--edge", edgeURL, "--token", tok, "--id", "poet", "--file", adapter); code != 0 {
			t.Fatalf("upload: %d %q %s", code, out, errOut)
		}
		native := func(lora string) (string, int) {
			t.Helper()
			body := fmt.Sprintf(`{"prompt":%q,"raw":true,"temperature":0,"max_tokens":%d%s}`, prompt, n, lora)
			status, b := post(t, tok, edgeURL+"/ai/run/"+builtin.Name, body)
			var a struct {
				Result struct {
					Response string `json:"response"`
					Usage    struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				} `json:"result"`
			}
			if status != 200 || json.Unmarshal(b, &a) != nil {
				t.Fatalf("%v lora %q: %d %s", args, lora, status, b)
			}
			return a.Result.Response, a.Result.Usage.CompletionTokens
		}
		for _, tc := range []struct {
			name, lora string
			want       generated
		}{
			{"without lora", "", plain},
			{"with lora", `,"lora":"poet"`, tuned},
			{"without lora again", "", plain},
		} {
			text, count := native(tc.lora)
			if text != tc.want.Text || count != len(tc.want.CompletionTokens) {
				t.Errorf("%v %s: %q (%d tokens), want the engine's %q (%d)", args, tc.name, text, count, tc.want.Text, len(tc.want.CompletionTokens))
			}
		}
		status, b := post(t, tok, edgeURL+"/v1/completions",
			fmt.Sprintf(`{"model":%q,"prompt":%q,"temperature":0,"max_tokens":%d}`, builtin.Name+":poet", prompt, n))
		var oa struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
		}
		if status != 200 || json.Unmarshal(b, &oa) != nil || len(oa.Choices) != 1 || oa.Choices[0].Text != tuned.Text {
			t.Errorf("%v OpenAI <model>:<finetune>: %d %s, want %q", args, status, b, tuned.Text)
		}
		if slices.Contains(args, "--disaggregated") {
			if got := strings.Count(d.node.stderr.String(), "handed over to a decode worker"); got != 4 {
				t.Errorf("dev --disaggregated logged %d hand-overs, want 4", got)
			}
		}
	}
}

// TestParseByteSize: --lora-memory's and --adapters-max-bytes's sizes.
func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // 0: refused
	}{
		{"1024", 1024}, {"512MiB", 512 << 20}, {"1GiB", 1 << 30}, {"64KiB", 64 << 10},
		{"0", 0}, {"-1GiB", 0}, {"1.5GiB", 0}, {"GiB", 0}, {"", 0}, {"9000000000GiB", 0},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseByteSize(tc.in)
			if tc.want == 0 && err == nil || tc.want != 0 && (err != nil || got != tc.want) {
				t.Fatalf("parseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
	if _, errOut, code := bulkhead(t, "worker", "--lora-memory", "0", "--model", "x=y"); code != 2 || !strings.Contains(errOut, "lora-memory") {
		t.Fatalf("worker --lora-memory 0: exit %d %s; want a usage error naming the flag", code, errOut)
	}
}
