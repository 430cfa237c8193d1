package chart

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

const repoRoot = "../.."

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

// stage is a FROM and what follows it.
type stage struct {
	base, name string
	body       []instruction
}

var knownInstructions = map[string]bool{
	"FROM": true, "RUN": true, "COPY": true, "ADD": true, "USER": true, "ENTRYPOINT": true, "CMD": true,
	"WORKDIR": true, "ENV": true, "ARG": true, "LABEL": true, "EXPOSE": true, "HEALTHCHECK": true, "STOPSIGNAL": true,
}

// parseDockerfile reads a Dockerfile strictly: comments, parser directives
// and backslash continuations as BuildKit reads them, and an error for an
// instruction it does not know or one before the first FROM (but ARG).
func parseDockerfile(data []byte) ([]stage, error) {
	var (
		stages  []stage
		pending strings.Builder
		start   int
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	flush := func() error {
		text := strings.TrimSpace(pending.String())
		pending.Reset()
		if text == "" {
			return nil
		}
		cmd, rest, _ := strings.Cut(text, " ")
		cmd = strings.ToUpper(cmd)
		if !knownInstructions[cmd] {
			return fmt.Errorf("line %d: unknown instruction %q", start, cmd)
		}
		in := instruction{line: start, cmd: cmd, args: strings.TrimSpace(rest)}
		if cmd == "FROM" {
			f := strings.Fields(in.args)
			st := stage{base: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else if len(f) != 1 {
				return fmt.Errorf("line %d: FROM %q", start, in.args)
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if cmd == "ARG" {
				return nil
			}
			return fmt.Errorf("line %d: %s before the first FROM", start, cmd)
		}
		stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		return nil
	}
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && pending.Len() == 0) {
			continue
		}
		if pending.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(trimmed, `\`) {
			pending.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		pending.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if pending.Len() > 0 {
		return nil, fmt.Errorf("line %d: a continuation runs off the end", start)
	}
	return stages, sc.Err()
}

func (s stage) find(cmd string) []instruction {
	var out []instruction
	for _, in := range s.body {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// shellless are final-stage bases without a shell or package manager.
var shellless = regexp.MustCompile(`^(scratch|gcr\.io/distroless/static(-debian\d+)?(:(latest|nonroot)(-[a-z0-9]+)?)?(@sha256:[0-9a-f]{64})?|cgr\.dev/chainguard/static(:latest)?)$`)

func readDockerfile(t *testing.T) []stage {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(data)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return stages
}

// TestDockerfile: a build stage, then a final stage on a base without a
// shell, running as a numeric non-root user (so runAsNonRoot can verify it;
// the chart runs its pods as the same user), with an exec-form ENTRYPOINT
// naming the binary copied from the build stage.
func TestDockerfile(t *testing.T) {
	stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a final one", len(stages))
	}
	final := stages[len(stages)-1]
	if !shellless.MatchString(final.base) {
		t.Errorf("final base %q has a shell (want scratch or distroless static, not :debug)", final.base)
	}
	if runs := final.find("RUN"); len(runs) > 0 {
		t.Errorf("final stage line %d: RUN needs a shell", runs[0].line)
	}
	users := final.find("USER")
	if len(users) == 0 {
		t.Fatal("final stage sets no USER: it would run as root")
	}
	user, group, _ := strings.Cut(users[len(users)-1].args, ":")
	uid, err := strconv.Atoi(user)
	if err != nil || uid <= 0 {
		t.Errorf("USER %q: want a numeric non-root uid", users[len(users)-1].args)
	}
	if gid, err := strconv.Atoi(group); group != "" && (err != nil || gid <= 0) {
		t.Errorf("USER group %q: want a numeric non-root gid", group)
	}
	sc := render(t, nil).deployments[name("edge")].Spec.Template.Spec.SecurityContext
	if sc.RunAsUser == nil || *sc.RunAsUser != int64(uid) || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("chart runs pods as %v (runAsNonRoot %v), the image as %d", sc.RunAsUser, sc.RunAsNonRoot, uid)
	}
	eps := final.find("ENTRYPOINT")
	if len(eps) != 1 {
		t.Fatalf("final stage has %d ENTRYPOINTs, want 1", len(eps))
	}
	var entry []string
	if err := json.Unmarshal([]byte(eps[0].args), &entry); err != nil || len(entry) == 0 {
		t.Fatalf("ENTRYPOINT %s is not the exec form (a JSON array): %v", eps[0].args, err)
	}
	copied := false
	names := map[string]bool{}
	for _, s := range stages[:len(stages)-1] {
		names[s.name] = s.name != ""
	}
	for _, c := range final.find("COPY") {
		f := strings.Fields(c.args)
		if len(f) == 3 && strings.HasPrefix(f[0], "--from=") {
			if !names[strings.TrimPrefix(f[0], "--from=")] {
				t.Errorf("line %d: COPY %s names no earlier stage", c.line, f[0])
			}
			copied = copied || f[2] == entry[0]
		}
	}
	if !copied {
		t.Errorf("ENTRYPOINT %s is not copied from a build stage", entry[0])
	}
	// The builder's Go is the one go.mod asks for.
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goLine == nil || !strings.HasPrefix(stages[0].base, "golang:"+string(goLine[1])) {
		t.Errorf("build base %s, go.mod wants go %s", stages[0].base, goLine[1])
	}
}

// buildCommand is the Dockerfile's `go build`: its environment assignments
// and arguments, with quotes removed.
func buildCommand(t *testing.T) (env, argv []string) {
	t.Helper()
	for _, s := range readDockerfile(t) {
		for _, r := range s.find("RUN") {
			words := shellWords(t, r.args)
			i := 0
			for i < len(words) && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[i]) {
				i++
			}
			if len(words) > i+1 && words[i] == "go" && words[i+1] == "build" {
				return words[:i], words[i:]
			}
		}
	}
	t.Fatal("the Dockerfile has no RUN go build")
	return nil, nil
}

// shellWords splits a simple command: spaces, single and double quotes; it
// refuses what it does not handle (variables, operators, escapes).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	if strings.ContainsAny(s, "$`;&|<>\\") {
		t.Fatalf("RUN %q: too complex to reproduce here", s)
	}
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("RUN %q: unbalanced quote", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
	buildDir  string
)

// TestMain removes the binary the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// binary builds cmd/bulkhead once, with the Dockerfile's own command (its
// -o pointed at a temporary directory).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		env, argv := buildCommand(t)
		if buildDir, buildErr = os.MkdirTemp("", "bulkhead-image-"); buildErr != nil {
			return
		}
		built = filepath.Join(buildDir, "bulkhead")
		out := -1
		for i, a := range argv {
			if a == "-o" && i+1 < len(argv) {
				out = i + 1
			}
		}
		if out < 0 {
			buildErr = fmt.Errorf("go build without -o: %v", argv)
			return
		}
		argv[out] = built
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), env...)
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%v: %v\n%s", argv, err, b)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// TestStaticBinary: the Dockerfile's build makes a binary with no program
// interpreter and no dynamic section, which a scratch or distroless static
// base can run.
func TestStaticBinary(t *testing.T) {
	env, _ := buildCommand(t)
	if !contains(env, "CGO_ENABLED=0") {
		t.Errorf("the Dockerfile's go build sets %v, want CGO_ENABLED=0", env)
	}
	f, err := elf.Open(binary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v: the binary is dynamically linked", p.Type)
		}
	}
	if s := f.Section(".dynamic"); s != nil {
		t.Error("the binary has a .dynamic section")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary imports %v", libs)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestChartFlags: every flag the chart passes a node, and every
// BULKHEAD_ variable it sets, is one that the image's binary has for that
// command (`bulkhead <cmd> --help`), so a renamed flag fails here rather
// than in a crash-looping pod.
func TestChartFlags(t *testing.T) {
	bin := binary(t)
	helps := map[string]string{}
	help := func(cmd string) string {
		if h, ok := helps[cmd]; ok {
			return h
		}
		out, _ := exec.Command(bin, cmd, "--help").CombinedOutput()
		if !strings.Contains(string(out), "Usage: bulkhead "+cmd) {
			t.Fatalf("bulkhead %s --help:\n%s", cmd, out)
		}
		helps[cmd] = string(out)
		return helps[cmd]
	}
	sets := valueSets(t)
	sets["everything"] = valueSet{vals: values(t, `{workers: {clampContext: true}, edge: {jwt: {audience: a, issuer: i}, webhooks: {hosts: [hooks.example.com], allowPrivate: true, caSecret: hooks-ca}}, billing: {exportSource: eu-1}, pools: {unified: {enabled: true}}}`)}
	for set, vs := range sets {
		for n, d := range vs.render(t).deployments {
			c := d.Spec.Template.Spec.Containers[0]
			cmd, flags := args(t, c)
			h := help(cmd)
			for f := range flags {
				if !strings.Contains(h, "\n  --"+f+"  ") {
					t.Errorf("%s/%s: bulkhead %s has no --%s", set, n, cmd, f)
				}
			}
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "BULKHEAD_") && !strings.Contains(h, "["+e.Name+"]") {
					t.Errorf("%s/%s: bulkhead %s reads no %s", set, n, cmd, e.Name)
				}
			}
		}
	}
}
