package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startAll starts the processes in dependency order and waits for each
// group: NATS (its streams set up with three replicas), Redis, billing and
// the workers, then the edges, until a request through each edge is served.
func (c *Cluster) startAll(ctx context.Context) error {
	for _, group := range [][]string{{RoleNATS}, {RoleRedis}, {RoleBilling, RolePrefill, RoleDecode, RoleUnified}, {RoleEdge}} {
		var procs []*Proc
		for _, role := range group {
			procs = append(procs, c.State.ByRole(role)...)
		}
		for _, p := range procs {
			if err := c.Spawn(p); err != nil {
				return err
			}
		}
		for _, p := range procs {
			if err := c.WaitReady(ctx, p); err != nil {
				return err
			}
			fmt.Fprintf(c.cfg.Progress, "  %-10s %-22s pid %d\n", p.Name, p.Addr, p.PID)
		}
	}
	for _, e := range c.State.ByRole(RoleEdge) {
		if err := c.waitServes(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// WaitReady waits until p answers: NATS once it printed that its streams
// are set up, Redis a PING, the others /readyz. A process that exits
// meanwhile is an error naming its log.
func (c *Cluster) WaitReady(ctx context.Context, p *Proc) error {
	var check func(context.Context) error
	switch p.Role {
	case RoleNATS:
		from := c.logFrom(p.Name)
		check = func(context.Context) error { return logHas(p.Log, from, natsReadyLine) }
	case RoleRedis:
		check = func(ctx context.Context) error { return redisPing(ctx, p.Addr) }
	default:
		check = func(ctx context.Context) error { return httpOK(ctx, "GET", "http://"+p.Addr+"/readyz", "", nil) }
	}
	return c.poll(ctx, p, check)
}

// natsReadyLine is what `bulkhead nats` prints once its streams and
// buckets are set up (and replicated) and it takes connections.
const natsReadyLine = "NATS with JetStream listening at"

// poll runs check until it passes, ctx ends or p exits.
func (c *Cluster) poll(ctx context.Context, p *Proc, check func(context.Context) error) error {
	done, _ := c.Exited(p.Name)
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("local: %s exited while starting (see %s): %s", p.Name, p.Log, tail(p.Log))
		case <-ctx.Done():
			return fmt.Errorf("local: %s not ready (see %s): %v", p.Name, p.Log, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitServes waits until a request through edge e is served: the edge
// sees live workers for the model.
func (c *Cluster) waitServes(ctx context.Context, e *Proc) error {
	body := `{"prompt":"Once upon a time","raw":true,"max_tokens":1}`
	return c.poll(ctx, e, func(ctx context.Context) error {
		return httpOK(ctx, "POST", c.EdgeURL(e)+"/ai/run/"+c.State.Model, body, map[string]string{"Authorization": "Bearer " + c.token})
	})
}

// EdgeURL is e's base URL.
func (c *Cluster) EdgeURL(e *Proc) string { return "http://" + e.Addr }

// Token is a token of tenant "local" the edges accept (24 h).
func (c *Cluster) Token() string { return c.token }

func httpOK(ctx context.Context, method, url, body string, hdr map[string]string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	return nil
}

// redisPing speaks just enough of Redis's protocol to ask PING.
func redisPing(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis at %s: PING answered %q", addr, strings.TrimSpace(line))
	}
	return nil
}

// logHas checks that the log at path says line past offset from.
func logHas(path string, from int64, line string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if int64(len(b)) < from || !strings.Contains(string(b[from:]), line) {
		return fmt.Errorf("%s does not say %q yet", path, line)
	}
	return nil
}

// tail is the last lines of a log, for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// stopOrder is the order down stops roles in: traffic first (edges drain
// their streams), then the workers (they finish or hand back their jobs),
// billing (its batch), and the stores last.
// Processes of other roles (a caller's own, added with Start) stop with the
// edges.
var stopOrder = [][]string{{RoleEdge, ""}, {RolePrefill, RoleDecode, RoleUnified}, {RoleBilling}, {RoleNATS}, {RoleRedis}}

// Down stops every process, a role group at a time: SIGTERM, then SIGKILL
// for what is still running past the grace and a margin. It reports the
// processes that had to be killed or did not exit 0.
func (c *Cluster) Down() error {
	return stopAll(c.State, c.cfg.Grace, c.waitExit)
}

// Down stops the processes of a cluster that another process started (`up`
// then `down`: their exit status is not this process's to read), as
// Cluster.Down does, and removes the state file.
func (s *State) Down(grace time.Duration) error {
	if err := stopAll(s, grace, pollExit); err != nil {
		return err
	}
	return os.Remove(filepath.Join(s.Dir, StateFile))
}

// stopGroup is the stopOrder group role stops in.
func stopGroup(role string) int {
	for i, g := range stopOrder {
		if slices.Contains(g, role) {
			return i
		}
	}
	return 0
}

// stopAll is Down for a state file, with wait telling when a pid is gone.
func stopAll(st *State, grace time.Duration, wait func(p *Proc, within time.Duration) error) error {
	if st == nil {
		return nil
	}
	var errs []error
	for group := range stopOrder {
		var procs []*Proc
		for _, p := range st.Procs {
			if stopGroup(p.Role) == group {
				procs = append(procs, p)
			}
		}
		var mu sync.Mutex // guards errs
		var wg sync.WaitGroup
		for _, p := range procs {
			if !p.Signal(syscall.SIGTERM) {
				continue
			}
			wg.Go(func() {
				if err := wait(p, grace+10*time.Second); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s: %w", p.Name, err))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	return errors.Join(errs...)
}

// waitExit waits for a child of this process (its exit status is known).
func (c *Cluster) waitExit(p *Proc, within time.Duration) error {
	done, werr := c.Exited(p.Name)
	select {
	case <-done:
		return werr()
	case <-time.After(within):
		p.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("still running %v after SIGTERM: killed", within)
	}
}

// pollExit waits for a process this one did not start (`down` in a new
// process: its exit status is its parent's to read).
func pollExit(p *Proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	for p.Alive() {
		if time.Now().After(deadline) {
			p.Signal(syscall.SIGKILL)
			return fmt.Errorf("still running %v after SIGTERM: killed", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
