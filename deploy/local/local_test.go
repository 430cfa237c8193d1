package local

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bulkhead-ai/bulkhead/models/testkit"
)

func TestConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no dir", Config{Bin: "/bin/true"}},
		{"no binary", Config{Dir: t.TempDir()}},
		{"model without a path", Config{Dir: t.TempDir(), Bin: "/bin/true", Model: "@cf/x"}},
		{"a worker of no role", Config{Dir: t.TempDir(), Bin: "/bin/true", Workers: []string{RoleDecode, "edge"}}},
		{"negative grace", Config{Dir: t.TempDir(), Bin: "/bin/true", Grace: -time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); !errors.Is(err, ErrConfig) {
				t.Fatalf("Validate = %v, want ErrConfig", err)
			}
		})
	}
}

// TestPlan: the planned cluster has every role (by default one prefill and
// two decode workers; --prefills 2 plans two, which the edges route
// between), distinct names and addresses, one route list naming the three
// servers, credentials per role, and a state file that reads back as
// written.
func TestPlan(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make deps)")
	}
	for _, prefills := range []int{0, 2} {
		var workers []string // the default
		if prefills > 0 {
			workers = []string{RolePrefill, RolePrefill, RoleDecode, RoleDecode}
		}
		c, err := New(Config{Dir: t.TempDir(), Bin: "/opt/bulkhead", Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.planProcs(); err != nil {
			t.Fatal(err)
		}
		roles := map[string]int{}
		addrs, names := map[string]bool{}, map[string]bool{}
		for _, p := range c.State.Procs {
			roles[p.Role]++
			if addrs[p.Addr] || names[p.Name] {
				t.Errorf("%s: name or address %s used twice", p.Name, p.Addr)
			}
			addrs[p.Addr], names[p.Name] = true, true
			args := strings.Join(p.Args, " ")
			switch p.Role {
			case RoleNATS:
				if strings.Count(args, "nats-route://") != 3 || !strings.Contains(args, "--replicas 3") {
					t.Errorf("%s: %s", p.Name, args)
				}
			case RoleEdge, RolePrefill, RoleDecode, RoleBilling:
				if !strings.Contains(args, "--nats-creds") || !strings.Contains(args, "--drain-grace") {
					t.Errorf("%s runs without credentials or a drain grace: %s", p.Name, args)
				}
			}
		}
		want := map[string]int{RoleNATS: 3, RoleRedis: 1, RoleEdge: 2, RolePrefill: max(prefills, 1), RoleDecode: 2, RoleBilling: 1}
		for role, n := range want {
			if roles[role] != n {
				t.Errorf("--prefills %d: %d %s processes, want %d", prefills, roles[role], role, n)
			}
		}
		if prefills == 2 && !(names["prefill-1"] && names["decode-0"] && names["decode-1"]) {
			t.Errorf("names %v, want prefill-0, prefill-1, decode-0, decode-1", names)
		}
		if err := c.State.write(); err != nil {
			t.Fatal(err)
		}
		st, err := ReadState(c.cfg.Dir)
		if err != nil || len(st.Procs) != len(c.State.Procs) || st.Model != c.State.Model {
			t.Fatalf("state read back: %+v, %v", st, err)
		}
		if anyAlive(st) {
			t.Fatal("a planned, never started process counts as alive")
		}
	}
}

// TestAlive: a pid is alive only while it runs the recorded binary.
func TestAlive(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(must(os.ReadFile("/proc/self/cmdline"))), "\x00")
	if !(&Proc{PID: os.Getpid(), Args: []string{args[0]}}).Alive() {
		t.Errorf("this test (%s, argv0 %s) is not alive", self, args[0])
	}
	if (&Proc{PID: os.Getpid(), Args: []string{"/usr/bin/something-else"}}).Alive() {
		t.Error("a pid running another binary counts as alive")
	}
	if (&Proc{PID: 0, Args: []string{args[0]}}).Alive() {
		t.Error("pid 0 counts as alive")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestNoCluster(t *testing.T) {
	if _, err := ReadState(t.TempDir()); !errors.Is(err, ErrNoCluster) {
		t.Fatalf("ReadState of an empty dir: %v", err)
	}
}

// TestPlanBare: a Bare cluster without credentials is one NATS server (no
// routes), Redis and the workers asked for, each with the flags it was
// given, and no node given credentials.
func TestPlanBare(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed (make deps)")
	}
	c, err := New(Config{Dir: t.TempDir(), Bin: "/opt/bulkhead", Bare: true, NoAuth: true,
		Workers: []string{RoleUnified, RoleUnified}, WorkerBin: "/opt/bulkhead-faults", WorkerArgs: []string{"--kv-poison"},
		NATSArgs: []string{"--tenant-creds", "acme"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.planProcs(); err != nil {
		t.Fatal(err)
	}
	roles := map[string]int{}
	for _, p := range c.State.Procs {
		roles[p.Role]++
		args := strings.Join(p.Args, " ")
		if strings.Contains(args, "--nats-creds") || strings.Contains(args, "--auth-dir") {
			t.Errorf("%s is given credentials: %s", p.Name, args)
		}
		switch p.Role {
		case RoleNATS:
			if strings.Contains(args, "--routes") || !strings.Contains(args, "--no-auth") || !strings.HasSuffix(args, "--tenant-creds acme") {
				t.Errorf("%s: %s", p.Name, args)
			}
		case RoleUnified:
			if p.Args[0] != "/opt/bulkhead-faults" || !strings.Contains(args, "--kv-poison") {
				t.Errorf("%s: %s", p.Name, args)
			}
		}
	}
	if want := (map[string]int{RoleNATS: 1, RoleRedis: 1, RoleUnified: 2}); !maps.Equal(roles, want) {
		t.Errorf("roles %v, want %v", roles, want)
	}
	if c.State.Creds != "" || strings.Contains(c.State.NATS, ",") {
		t.Errorf("creds %q, NATS %q: want none and one server", c.State.Creds, c.State.NATS)
	}
}

// TestStart: a caller's own process runs with its environment, its output
// is read back from its log, a second process of the same name is refused,
// and Down stops it.
func TestStart(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	c, err := New(Config{Dir: t.TempDir(), Bin: sh, Bare: true, NoAuth: true, Workers: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Start(Proc{Name: "echo", Env: []string{"GREETING=hello"}, Args: []string{sh, "-c", `echo "$GREETING"; while :; do sleep 0.1; done`}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Poll(t, 10*time.Second, testkit.Cond("the greeting", func() bool { return c.Output("echo") == "hello\n" }))
	if _, err := c.Start(Proc{Name: "echo", Args: []string{sh, "-c", "true"}}); !errors.Is(err, ErrConfig) {
		t.Errorf("a second process named echo: %v, want ErrConfig", err)
	}
	if err := c.Down(); err == nil {
		t.Error("Down reported no error for a process killed by SIGTERM")
	}
	if done, _ := c.Exited(p.Name); !isClosed(done) || p.Alive() {
		t.Error("the process outlived Down")
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
