package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bulkhead-ai/bulkhead/edge/auth"
	"github.com/bulkhead-ai/bulkhead/models/builtin"
	"github.com/bulkhead-ai/bulkhead/queue"
)

// ErrConfig reports a cluster configuration that cannot start.
var ErrConfig = errors.New("local: invalid config")

// Config says what to start. Zero values take the defaults noted.
type Config struct {
	Dir string // state file, logs, stores, keys; required
	Bin string // the bulkhead binary; required (up builds one when its flag is empty)
	// Model is NAME=PATH.gguf; default: the built-in model, written into Dir.
	Model string
	// More are more NAME=PATH.gguf models every worker and edge serves
	// beside Model.
	More []string
	// EdgeAddrs are the edges' listen addresses, one per edge; default two
	// on free loopback ports.
	EdgeAddrs []string
	Decoders  int // decode workers; default 2
	// Prefills is the prefill workers; default 1. With two or more the
	// edges route each job to the one that holds its prefix, or by load
	// (docs/routing.md), as they route unified workers.
	Prefills int
	// Grace is each node's drain grace (--drain-grace); default 10s.
	Grace time.Duration
	// FailOpen starts the edges with --quota-fail-open: admit requests
	// while Redis is unreachable instead of refusing them with 503.
	FailOpen bool
	// Timeout bounds up, from the first process to both edges serving;
	// default 3m.
	Timeout time.Duration
	// Progress, when set, gets a line per step.
	Progress io.Writer
}

// Validate fills the defaults and checks what cannot be defaulted.
func (c *Config) Validate() error {
	if len(c.EdgeAddrs) == 0 {
		c.EdgeAddrs = []string{"127.0.0.1:0", "127.0.0.1:0"}
	}
	if c.Decoders == 0 {
		c.Decoders = 2
	}
	if c.Prefills == 0 {
		c.Prefills = 1
	}
	if c.Grace == 0 {
		c.Grace = 10 * time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Minute
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	switch {
	case c.Dir == "":
		return fmt.Errorf("%w: Dir is required", ErrConfig)
	case c.Bin == "":
		return fmt.Errorf("%w: Bin is required", ErrConfig)
	case c.Decoders < 0 || c.Prefills < 0 || c.Grace < 0 || c.Timeout < 0:
		return fmt.Errorf("%w: Decoders %d, Prefills %d, Grace %v, Timeout %v", ErrConfig, c.Decoders, c.Prefills, c.Grace, c.Timeout)
	case c.Model != "" && !strings.Contains(c.Model, "="):
		return fmt.Errorf("%w: Model %q is not NAME=PATH.gguf", ErrConfig, c.Model)
	case slices.ContainsFunc(c.More, func(m string) bool { return !strings.Contains(m, "=") }):
		return fmt.Errorf("%w: More %q: each is NAME=PATH.gguf", ErrConfig, c.More)
	}
	return nil
}

// Cluster is a running local cluster started by this process: it reaps its
// children, so it knows how each one exited.
type Cluster struct {
	cfg   Config
	State *State
	token string // a token of tenant "local" for probes

	mu    sync.Mutex // guards exits
	exits map[string]*exit
}

// exit is one spawn of a process: done closes when it has exited, with err
// its wait error (nil: status 0).
type exit struct {
	done    chan struct{}
	err     error
	logFrom int64 // the log's size when it started: what it printed follows
}

// natsCluster is the JetStream cluster's name.
const natsCluster = "bulkhead-local"

// Up starts every process and returns once both edges serve the model.
// On error what was started is stopped again.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if s, err := readState(cfg.Dir); err == nil && anyAlive(s) {
		return nil, fmt.Errorf("%w: a cluster from %s is still running: run down first", ErrConfig, cfg.Dir)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	c := &Cluster{cfg: cfg, exits: map[string]*exit{}}
	if err := c.plan(); err != nil {
		return nil, err
	}
	if err := c.startAll(ctx); err != nil {
		c.Down()
		return nil, err
	}
	return c, nil
}

func anyAlive(s *State) bool {
	for i := range s.Procs {
		if s.Procs[i].alive() {
			return true
		}
	}
	return false
}

// plan lays out the directories, keys, credentials, model and ports, and
// the command line of every process.
func (c *Cluster) plan() error {
	dir, err := filepath.Abs(c.cfg.Dir)
	if err != nil {
		return err
	}
	// A fresh cluster every time: old stores name peers on other ports.
	for _, sub := range []string{"logs", "redis", "nats-0", "nats-1", "nats-2"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	for _, sub := range []string{"logs", "models", "redis"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	st := &State{Dir: dir, KeyDir: filepath.Join(dir, "keys"), Creds: filepath.Join(dir, "nats-creds")}
	key, err := auth.LoadOrCreateDevKey(st.KeyDir)
	if err != nil {
		return err
	}
	st.JWKS = key.JWKSPath()
	if c.token, err = key.Mint("local", []string{auth.ScopeRun, auth.ScopeRead}, nil, 24*time.Hour); err != nil {
		return err
	}
	// Every server must accept the same role keys: write them once here.
	if _, err := queue.LoadOrCreateAuth(st.Creds); err != nil {
		return err
	}
	model := c.cfg.Model
	if model == "" {
		path, err := builtin.WriteTo(filepath.Join(dir, "models"))
		if err != nil {
			return err
		}
		model = builtin.Name + "=" + path
	}
	st.Model, _, _ = strings.Cut(model, "=")
	c.State = st
	return c.planProcs(model)
}

// planProcs fills State.Procs: three NATS servers, Redis, billing, the
// workers and the edges, in start order.
func (c *Cluster) planProcs(model string) error {
	st := c.State
	// NATS clients and routes, Redis, billing, the prefill workers, the
	// decode workers and the edges.
	ports, err := freePorts(6 + 2 + c.cfg.Prefills + c.cfg.Decoders + len(c.cfg.EdgeAddrs))
	if err != nil {
		return err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return "127.0.0.1:" + strconv.Itoa(p) }
	var clients, routes []string
	for range 3 {
		clients, routes = append(clients, next()), append(routes, "nats-route://"+next())
	}
	var urls []string
	for _, a := range clients {
		urls = append(urls, "nats://"+a)
	}
	st.NATS = strings.Join(urls, ",")
	grace := "--drain-grace=" + c.cfg.Grace.String()
	var models []string // the --model flags of every worker and edge
	for _, m := range append([]string{model}, c.cfg.More...) {
		models = append(models, "--model", m)
	}
	for i, a := range clients {
		c.add(roleNATS, i, a, "nats", "--listen", a, "--store-dir", filepath.Join(st.Dir, fmt.Sprintf("nats-%d", i)),
			"--auth-dir", st.Creds, "--server-name", fmt.Sprintf("nats-%d", i), "--cluster-name", natsCluster,
			"--cluster-listen", strings.TrimPrefix(routes[i], "nats-route://"), "--routes", strings.Join(routes, ","), "--replicas", "3")
	}
	redisAddr := next()
	st.Redis = "redis://" + redisAddr + "/0"
	if err := c.addRedis(redisAddr); err != nil {
		return err
	}
	creds := func(role string) string { return filepath.Join(st.Creds, queue.CredsFile(role)) }
	c.add(roleBilling, 0, next(), "billing", "--nats", st.NATS, "--nats-creds", creds(queue.RoleBilling),
		"--redis", st.Redis, grace)
	workers := append(repeat(rolePrefill, c.cfg.Prefills), repeat(roleDecode, c.cfg.Decoders)...)
	for i, role := range workers {
		index := i // prefill-0, prefill-1, ..., then decode-0, ...
		if role == roleDecode {
			index -= c.cfg.Prefills
		}
		c.add(role, index, next(), append([]string{"worker", "--nats", st.NATS, "--nats-creds", creds(queue.RoleWorker),
			"--role", role, "--threads", "1", grace,
			// Room for a few full-context requests at once.
			"--kv-pool-tokens", "8192"}, models...)...)
	}
	for i, a := range c.cfg.EdgeAddrs {
		if strings.HasSuffix(a, ":0") {
			a = next()
		}
		args := []string{"edge", "--nats", st.NATS, "--nats-creds", creds(queue.RoleEdge), "--listen", a,
			"--redis", st.Redis, "--jwks", st.JWKS, grace,
			// Limits high enough never to refuse the tests' load, so that
			// every request goes through Redis.
			"--quota-rpm", "100000", "--quota-concurrent", "1000"}
		args = append(args, models...)
		if c.cfg.FailOpen {
			args = append(args, "--quota-fail-open")
		}
		c.add(roleEdge, i, a, args...)
	}
	return nil
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// add records a bulkhead process; workers and billing get their listener
// as --metrics-listen.
func (c *Cluster) add(role string, i int, addr string, args ...string) {
	name := fmt.Sprintf("%s-%d", role, i)
	if role == rolePrefill || role == roleDecode || role == roleBilling {
		args = append(args, "--metrics-listen", addr)
	}
	c.State.Procs = append(c.State.Procs, Proc{Name: name, Role: role, Addr: addr,
		Log: filepath.Join(c.State.Dir, "logs", name+".log"), Args: append([]string{c.cfg.Bin}, args...)})
}

func (c *Cluster) addRedis(addr string) error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("local: redis-server not found (make deps installs it): %w", err)
	}
	_, port, _ := net.SplitHostPort(addr)
	// Append-only, written to the file before each reply and fsynced every
	// second (Redis's own recommendation): stopping or killing Redis loses
	// no acknowledged write, a crash of the machine at most the last
	// second or two. appendfsync always would close that window, but it
	// stalls every command behind the disk: under issue 21's flood one fsync
	// held Redis for up to 749 ms, and every quota check with it
	// (docs/operations.md, "Redis durability").
	c.State.Procs = append(c.State.Procs, Proc{Name: "redis-0", Role: roleRedis, Addr: addr,
		Log: filepath.Join(c.State.Dir, "logs", "redis-0.log"),
		Args: []string{bin, "--port", port, "--bind", "127.0.0.1", "--dir", filepath.Join(c.State.Dir, "redis"),
			"--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no"}})
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Spawn starts p (again) from its recorded command line, its output
// appended to its log, in its own process group (so that a terminal's ^C
// reaches only `up`), and records its new pid in the state file.
func (c *Cluster) Spawn(p *Proc) error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var from int64
	if fi, err := f.Stat(); err == nil {
		from = fi.Size()
	}
	cmd := exec.Command(p.Args[0], p.Args[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "BULKHEAD_LOG_FORMAT=text")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("local: starting %s: %w", p.Name, err)
	}
	p.PID = cmd.Process.Pid
	e := &exit{done: make(chan struct{}), logFrom: from}
	c.mu.Lock()
	c.exits[p.Name] = e
	c.mu.Unlock()
	go func() { e.err = cmd.Wait(); close(e.done) }()
	return c.State.write()
}

// logFrom is where the log of name's latest spawn starts.
func (c *Cluster) logFrom(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.exits[name]; e != nil {
		return e.logFrom
	}
	return 0
}

// Exited returns the channel closed when p's latest spawn exits, and a
// function that reads its wait error once it has.
func (c *Cluster) Exited(name string) (<-chan struct{}, func() error) {
	c.mu.Lock()
	e := c.exits[name]
	c.mu.Unlock()
	if e == nil {
		closed := make(chan struct{})
		close(closed)
		return closed, func() error { return nil }
	}
	return e.done, func() error { <-e.done; return e.err }
}
