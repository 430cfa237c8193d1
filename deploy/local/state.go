package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Roles of the processes in a local cluster.
const (
	RoleNATS    = "nats"
	RoleRedis   = "redis"
	RoleEdge    = "edge"
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleUnified = "unified" // a worker that prefills and decodes
	RoleBilling = "billing"
)

// Proc is one process of the cluster as the state file records it.
type Proc struct {
	Name string `json:"name"` // unique: nats-0, edge-1, decode-0, ...
	Role string `json:"role"`
	// Addr is what the process listens on for its clients: NATS's client
	// port, Redis's port, an edge's HTTP listener, a worker's or billing's
	// /metrics and /readyz listener.
	Addr string   `json:"addr"`
	PID  int      `json:"pid"`
	Log  string   `json:"log"`
	Args []string `json:"args"` // argv, the binary first
	// Env is more environment for the process (NAME=value), beside this
	// process's own.
	Env []string `json:"env,omitempty"`
}

// State is the state file: what `up` started.
type State struct {
	Dir   string `json:"dir"`
	Model string `json:"model"` // the catalog name served
	// NATS is the client URL list every node was given.
	NATS  string `json:"nats"`
	Redis string `json:"redis"`
	JWKS  string `json:"jwks"`
	// KeyDir holds the dev signing key: `bulkhead token --key-dir` mints
	// tokens the edges accept.
	KeyDir string  `json:"key_dir"`
	Creds  string  `json:"creds"` // the NATS role credentials (one .nk per role)
	Procs  []*Proc `json:"processes"`
}

// StateFile is the state file's name in the cluster's directory.
const StateFile = "state.json"

// ErrNoCluster is a state file that is not there: nothing is running.
var ErrNoCluster = errors.New("local: no cluster state (is it up?)")

func (s *State) write() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.Dir, StateFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, StateFile))
}

// ReadState reads the state file in dir.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s in %s", ErrNoCluster, StateFile, dir)
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("local: %s: %w", StateFile, err)
	}
	return &s, nil
}

// Proc returns the process named name.
func (s *State) Proc(name string) (*Proc, error) {
	for _, p := range s.Procs {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("local: no process %q", name)
}

// ByRole lists the processes of role, in start order.
func (s *State) ByRole(role string) []*Proc {
	var out []*Proc
	for _, p := range s.Procs {
		if p.Role == role {
			out = append(out, p)
		}
	}
	return out
}

// Alive reports whether p's pid is still the process we started: it exists,
// is not a zombie, and runs p's binary (a pid reused by another program is
// never signalled).
func (p *Proc) Alive() bool {
	if p.PID <= 0 || len(p.Args) == 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.PID))
	if err != nil {
		return false
	}
	// Redis rewrites its argv into a title ("redis-server 127.0.0.1:6379"):
	// the binary's path stays its first word.
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	first, _, _ := strings.Cut(argv0, " ")
	return first == p.Args[0]
}

// Signal sends sig to p if it is still alive; false if it was not.
func (p *Proc) Signal(sig syscall.Signal) bool {
	if !p.Alive() {
		return false
	}
	return syscall.Kill(p.PID, sig) == nil
}
