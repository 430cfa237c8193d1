package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestConfigRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no dir", Config{Bin: "/bin/true"}},
		{"no binary", Config{Dir: t.TempDir()}},
		{"model without a path", Config{Dir: t.TempDir(), Bin: "/bin/true", Model: "@cf/x"}},
		{"negative decoders", Config{Dir: t.TempDir(), Bin: "/bin/true", Decoders: -1}},
		{"negative prefills", Config{Dir: t.TempDir(), Bin: "/bin/true", Prefills: -1}},
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
		c := &Cluster{cfg: Config{Dir: t.TempDir(), Bin: "/opt/bulkhead", Prefills: prefills}, exits: map[string]*exit{}}
		if err := c.cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := c.plan(); err != nil {
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
			case roleNATS:
				if strings.Count(args, "nats-route://") != 3 || !strings.Contains(args, "--replicas 3") {
					t.Errorf("%s: %s", p.Name, args)
				}
			case roleEdge, rolePrefill, roleDecode, roleBilling:
				if !strings.Contains(args, "--nats-creds") || !strings.Contains(args, "--drain-grace") {
					t.Errorf("%s runs without credentials or a drain grace: %s", p.Name, args)
				}
			}
		}
		want := map[string]int{roleNATS: 3, roleRedis: 1, roleEdge: 2, rolePrefill: max(prefills, 1), roleDecode: 2, roleBilling: 1}
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
		st, err := readState(c.cfg.Dir)
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
	if !(&Proc{PID: os.Getpid(), Args: []string{args[0]}}).alive() {
		t.Errorf("this test (%s, argv0 %s) is not alive", self, args[0])
	}
	if (&Proc{PID: os.Getpid(), Args: []string{"/usr/bin/something-else"}}).alive() {
		t.Error("a pid running another binary counts as alive")
	}
	if (&Proc{PID: 0, Args: []string{args[0]}}).alive() {
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
	if _, err := readState(t.TempDir()); !errors.Is(err, errNoCluster) {
		t.Fatalf("readState of an empty dir: %v", err)
	}
}
