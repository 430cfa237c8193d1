package local

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
	Bin string // the bulkhead binary; required
	// Model is NAME=PATH.gguf; default: the built-in model, written into Dir.
	Model string
	// More are more NAME=PATH.gguf models every worker and edge serves
	// beside Model.
	More []string
	// EdgeAddrs are the edges' listen addresses, one per edge; default two
	// on free loopback ports.
	EdgeAddrs []string
	// Workers are the worker processes' roles (RolePrefill, RoleDecode or
	// RoleUnified), in start order; default one prefill and two decode
	// workers (disaggregated serving). With two or more prefill workers the
	// edges route each job to the one that holds its prefix, or by load
	// (docs/routing.md), as they route unified workers.
	Workers []string
	// WorkerBin runs the workers instead of Bin (a build with -tags
	// faults, say), and WorkerArgs are more flags for each of them.
	WorkerBin  string
	WorkerArgs []string
	// NATSArgs are more flags for each `bulkhead nats` server.
	NATSArgs []string
	// Bare starts one NATS server, Redis and the workers only: no billing
	// and no edges (Edge and Start add what a caller needs).
	Bare bool
	// NoAuth starts NATS without credentials (--no-auth), and gives the
	// nodes none.
	NoAuth bool
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
	if len(c.EdgeAddrs) == 0 && !c.Bare {
		c.EdgeAddrs = []string{"127.0.0.1:0", "127.0.0.1:0"}
	}
	if c.Workers == nil {
		c.Workers = []string{RolePrefill, RoleDecode, RoleDecode}
	}
	if c.WorkerBin == "" {
		c.WorkerBin = c.Bin
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
	case c.Grace < 0 || c.Timeout < 0:
		return fmt.Errorf("%w: Grace %v, Timeout %v", ErrConfig, c.Grace, c.Timeout)
	case slices.ContainsFunc(c.Workers, func(r string) bool { return r != RolePrefill && r != RoleDecode && r != RoleUnified }):
		return fmt.Errorf("%w: Workers %q: each is %s, %s or %s", ErrConfig, c.Workers, RolePrefill, RoleDecode, RoleUnified)
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
	// models are the --model flags of every worker and edge.
	models []string

	mu    sync.Mutex // guards exits, State.Procs and the state file
	exits map[string]*exit
}

// exit is one spawn of a process: done closes when it has exited, with err
// its wait error (nil: status 0).
type exit struct {
	done    chan struct{}
	err     error
	logFrom int64 // the log's size when it started: what it printed follows
}

// NATSCluster is the JetStream cluster's name.
const NATSCluster = "bulkhead-local"

// Up starts every process and returns once both edges serve the model.
// On error what was started is stopped again.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if err := c.planProcs(); err != nil {
		return nil, err
	}
	if err := c.startAll(ctx); err != nil {
		c.Down()
		return nil, err
	}
	return c, nil
}

// New lays out an empty cluster in cfg.Dir (directories, keys, NATS
// credentials, the model) and starts nothing: Start and Edge add processes
// one at a time, and Down stops what they started.
func New(cfg Config) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if s, err := ReadState(cfg.Dir); err == nil && anyAlive(s) {
		return nil, fmt.Errorf("%w: a cluster from %s is still running: run down first", ErrConfig, cfg.Dir)
	}
	c := &Cluster{cfg: cfg, exits: map[string]*exit{}}
	if err := c.plan(); err != nil {
		return nil, err
	}
	return c, c.State.write()
}

func anyAlive(s *State) bool {
	return slices.ContainsFunc(s.Procs, (*Proc).Alive)
}

// plan lays out the directories, keys, credentials and model.
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
	st := &State{Dir: dir, KeyDir: filepath.Join(dir, "keys")}
	key, err := auth.LoadOrCreateDevKey(st.KeyDir)
	if err != nil {
		return err
	}
	st.JWKS = key.JWKSPath()
	if c.token, err = key.Mint("local", []string{auth.ScopeRun, auth.ScopeRead}, nil, 24*time.Hour); err != nil {
		return err
	}
	if !c.cfg.NoAuth {
		// Every server must accept the same role keys: write them once here.
		st.Creds = filepath.Join(dir, "nats-creds")
		if _, err := queue.LoadOrCreateAuth(st.Creds); err != nil {
			return err
		}
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
	for _, m := range append([]string{model}, c.cfg.More...) {
		c.models = append(c.models, "--model", m)
	}
	c.State = st
	return nil
}

// planProcs adds Up's processes: the NATS servers (three in one JetStream
// cluster, or one when Bare), Redis, billing, the workers and the edges, in
// start order.
func (c *Cluster) planProcs() error {
	st := c.State
	servers := 3
	if c.cfg.Bare {
		servers = 1
	}
	// NATS clients and routes, Redis, billing, the workers and the edges.
	ports, err := freePorts(2*servers + 2 + len(c.cfg.Workers) + len(c.cfg.EdgeAddrs))
	if err != nil {
		return err
	}
	next := func() string { p := ports[0]; ports = ports[1:]; return "127.0.0.1:" + strconv.Itoa(p) }
	c.planNATS(servers, next)
	redisAddr := next()
	st.Redis = "redis://" + redisAddr + "/0"
	if err := c.addRedis(redisAddr); err != nil {
		return err
	}
	if billing := next(); !c.cfg.Bare {
		c.add(RoleBilling, billing, append([]string{"billing", "--nats", st.NATS, "--redis", st.Redis, c.grace()},
			c.Creds(queue.RoleBilling)...)...)
	}
	for _, role := range c.cfg.Workers {
		args := append([]string{"worker", "--nats", st.NATS, "--role", role, "--threads", "1", c.grace(),
			// Room for a few full-context requests at once.
			"--kv-pool-tokens", "8192"}, c.Creds(queue.RoleWorker)...)
		args = append(append(args, c.models...), c.cfg.WorkerArgs...)
		c.add(role, next(), args...).Args[0] = c.cfg.WorkerBin
	}
	for _, a := range c.cfg.EdgeAddrs {
		if strings.HasSuffix(a, ":0") {
			a = next()
		}
		// Limits high enough never to refuse the tests' load, so that
		// every request goes through Redis.
		args := []string{"--quota-rpm", "100000", "--quota-concurrent", "1000"}
		if c.cfg.FailOpen {
			args = append(args, "--quota-fail-open")
		}
		c.addEdge(a, args...)
	}
	return nil
}

// planNATS adds the NATS servers, each listening on next(); more than one
// form a JetStream cluster with a replica of every stream on each.
func (c *Cluster) planNATS(servers int, next func() string) {
	var clients, routes []string
	for range servers {
		clients = append(clients, next())
		if servers > 1 {
			routes = append(routes, "nats-route://"+next())
		}
	}
	var urls []string
	for _, a := range clients {
		urls = append(urls, "nats://"+a)
	}
	c.State.NATS = strings.Join(urls, ",")
	for i, a := range clients {
		args := []string{"nats", "--listen", a, "--store-dir", filepath.Join(c.State.Dir, fmt.Sprintf("nats-%d", i)),
			"--server-name", fmt.Sprintf("nats-%d", i)}
		if servers > 1 {
			args = append(args, "--cluster-name", NATSCluster, "--cluster-listen", strings.TrimPrefix(routes[i], "nats-route://"),
				"--routes", strings.Join(routes, ","), "--replicas", strconv.Itoa(servers))
		}
		if c.cfg.NoAuth {
			args = append(args, "--no-auth")
		} else {
			args = append(args, "--auth-dir", c.State.Creds)
		}
		c.add(RoleNATS, a, append(args, c.cfg.NATSArgs...)...)
	}
}

// Creds is the --nats-creds flag of a node of role (none with NoAuth).
func (c *Cluster) Creds(role string) []string {
	if c.cfg.NoAuth {
		return nil
	}
	return []string{"--nats-creds", filepath.Join(c.State.Creds, queue.CredsFile(role))}
}

func (c *Cluster) grace() string { return "--drain-grace=" + c.cfg.Grace.String() }

// addEdge adds an edge listening on addr, serving every model, with more
// flags args.
func (c *Cluster) addEdge(addr string, args ...string) *Proc {
	st := c.State
	all := append([]string{"edge", "--nats", st.NATS, "--listen", addr, "--redis", st.Redis, "--jwks", st.JWKS, c.grace()},
		c.Creds(queue.RoleEdge)...)
	return c.add(RoleEdge, addr, append(append(all, c.models...), args...)...)
}

// Edge starts one more edge, given more flags args (a later flag wins), and
// waits until it is ready.
func (c *Cluster) Edge(ctx context.Context, args ...string) (*Proc, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	p := c.addEdge("127.0.0.1:"+strconv.Itoa(ports[0]), args...)
	if err := c.Spawn(p); err != nil {
		return nil, err
	}
	return p, c.WaitReady(ctx, p)
}

// Start adds a process of the caller's own (Name, Role, Args with the
// binary first, and Env) and spawns it. It does not wait for it: WaitReady
// knows the roles above, and a caller knows its own process.
func (c *Cluster) Start(p Proc) (*Proc, error) {
	c.mu.Lock()
	_, err := c.State.Proc(p.Name)
	if err == nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: a process named %q already runs", ErrConfig, p.Name)
	}
	p.Log, p.PID = filepath.Join(c.State.Dir, "logs", p.Name+".log"), 0
	c.State.Procs = append(c.State.Procs, &p)
	c.mu.Unlock()
	return &p, c.Spawn(&p)
}

// add records a bulkhead process named after its role and its index
// among them (edge-0, decode-1, ...); workers and billing get their
// listener as --metrics-listen.
func (c *Cluster) add(role, addr string, args ...string) *Proc {
	if role == RolePrefill || role == RoleDecode || role == RoleUnified || role == RoleBilling {
		args = append(args, "--metrics-listen", addr)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	name := fmt.Sprintf("%s-%d", role, len(c.State.ByRole(role)))
	p := &Proc{Name: name, Role: role, Addr: addr, Log: filepath.Join(c.State.Dir, "logs", name+".log"),
		Args: append([]string{c.cfg.Bin}, args...)}
	c.State.Procs = append(c.State.Procs, p)
	return p
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
	c.add(RoleRedis, addr, "--port", port, "--bind", "127.0.0.1", "--dir", filepath.Join(c.State.Dir, "redis"),
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no").Args[0] = bin
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
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("local: starting %s: %w", p.Name, err)
	}
	e := &exit{done: make(chan struct{}), logFrom: from}
	go func() { e.err = cmd.Wait(); close(e.done) }()
	c.mu.Lock()
	defer c.mu.Unlock()
	p.PID = cmd.Process.Pid
	c.exits[p.Name] = e
	return c.State.write()
}

// Output is what name's latest spawn printed so far.
func (c *Cluster) Output(name string) string {
	c.mu.Lock()
	p, _ := c.State.Proc(name)
	c.mu.Unlock()
	if p == nil {
		return ""
	}
	b, _ := os.ReadFile(p.Log)
	return string(b[min(c.logFrom(name), int64(len(b))):])
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
