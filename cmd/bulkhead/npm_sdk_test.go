package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// npmSDKs are the official npm SDKs TestNpmSDKs drives, pinned.
var npmSDKs = []string{"openai@7.60.0", "cloudflare@7.3.0"}

// npmSDKDir installs npmSDKs once into the user's cache directory (npm
// install, from the registry) and returns that directory.
func npmSDKDir(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (make deps installs it): %v", tool, err)
		}
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "bulkhead", "npm-sdks-"+strings.NewReplacer("@", "-", "/", "-").Replace(strings.Join(npmSDKs, "_")))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "cloudflare", "package.json")); err == nil {
		return dir
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "npm-install-")
	if err != nil {
		if err = os.MkdirAll(filepath.Dir(dir), 0o755); err == nil {
			tmp, err = os.MkdirTemp(filepath.Dir(dir), "npm-install-")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("npm", append([]string{"install", "--no-audit", "--no-fund", "--no-save", "--prefix", tmp}, npmSDKs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %v: %v\n%s", npmSDKs, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.RemoveAll(tmp)
		if _, serr := os.Stat(dir); serr != nil { // not another test's install
			t.Fatal(err)
		}
	}
	return dir
}

// TestNpmSDKs drives real processes with the official openai and
// cloudflare npm SDKs (testdata/sdks.mjs), each field sent as the SDK
// documents it: n (three choices, each with its seed, streamed alike),
// logit_bias, metadata, user, reasoning_effort (refused by name on a model
// whose template has no thinking switch), prompt_cache_key, and on
// Cloudflare's SDK ai.run with options.rejectIfBusy in the body, and the
// account id checked against the token.
func TestNpmSDKs(t *testing.T) {
	dir := npmSDKDir(t)
	script, err := os.ReadFile(filepath.Join("testdata", "sdks.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	// The script sits beside the shared node_modules, under a name of its
	// own: a second test process (another make test on the machine) runs
	// its own copy at the same time.
	f, err := os.CreateTemp(dir, "sdks-*.mjs")
	if err != nil {
		t.Fatal(err)
	}
	run := f.Name()
	defer os.Remove(run)
	if _, err := f.Write(script); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	c := startCluster(t)
	edgeURL := c.edge(t)
	tok := c.token(t, "acme")
	if status, b := post(t, tok, edgeURL+"/ai/run/"+clusterModel, `{"prompt":"Once","max_tokens":2}`); status != 200 {
		t.Fatalf("warm-up: %d %s", status, b)
	}
	cmd := exec.Command("node", run)
	cmd.Env = append(os.Environ(), "EDGE="+edgeURL, "TOKEN="+tok, "TENANT=acme", "MODEL="+clusterModel)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("node %s: %v\n%s%s", run, err, out, stderr)
	}
	type result struct {
		OK      bool            `json:"ok"`
		Value   json.RawMessage `json:"value"`
		Status  int             `json:"status"`
		Message string          `json:"message"`
	}
	var got map[string]result
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ok := func(name string) json.RawMessage {
		t.Helper()
		r, found := got[name]
		if !found || !r.OK {
			t.Errorf("%s: %+v", name, r)
		}
		return r.Value
	}
	refused := func(name string, status int, field string) {
		t.Helper()
		r := got[name]
		if r.OK || r.Status != status || !strings.Contains(r.Message, field) {
			t.Errorf("%s: %+v, want %d naming %s", name, r, status, field)
		}
	}

	var n struct {
		Choices []struct {
			Index int    `json:"index"`
			Seed  uint64 `json:"seed"`
			Text  string `json:"text"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(ok("n"), &n); err != nil || len(n.Choices) != 3 {
		t.Errorf("n: %v %+v", err, n)
	}
	var streamed map[string]string
	_ = json.Unmarshal(ok("n stream"), &streamed)
	for i, c := range n.Choices {
		if c.Index != i || c.Seed != uint64(11+i) || c.Text == "" || streamed[strconv.Itoa(c.Index)] != c.Text {
			t.Errorf("choice %d: %+v, streamed %q", i, c, streamed)
		}
	}
	refused("n too many", 400, "n")
	ok("logit_bias")
	refused("logit_bias outside the vocabulary", 400, "logit_bias")
	ok("metadata and user")
	refused("metadata too many", 400, "metadata")
	refused("reasoning_effort without a thinking switch", 400, "reasoning_effort")
	ok("prompt_cache_key")
	var cf struct {
		Response string `json:"response"`
	}
	if err := json.Unmarshal(ok("cloudflare run"), &cf); err != nil || cf.Response == "" {
		t.Errorf("cloudflare run: %v %+v", err, cf)
	}
	ok("cloudflare options.rejectIfBusy")
	refused("cloudflare another account", 403, "")
	t.Logf("npm SDKs %v: %d checks", npmSDKs, len(got))
}
