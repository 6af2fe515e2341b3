package rollout

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cellttl/cellttl/loadtest/bench"
)

// proc is one worker process: a pod of the Deployment.
type proc struct {
	name    string
	cmd     *exec.Cmd
	admin   string // http://host:port
	logPath string
	started time.Time
	ready   time.Time
	termAt  time.Time     // SIGTERM sent
	exited  time.Time     // set before done closes
	exitErr error         // set before done closes
	cpu     time.Duration // its CPU time, set before done closes
	done    chan struct{} // closed when the process has exited
}

// startWorker starts `worker run` of bin in the group, its log (JSON, info)
// in dir/<name>.log.
func startWorker(bin, dir, name string, args []string) (*proc, error) {
	port, err := bench.FreePort()
	if err != nil {
		return nil, err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args = append([]string{"run", "--admin-addr", admin, "--log-format", "json", "--log-level", "info"}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, admin: "http://" + admin, logPath: logPath, started: time.Now(), done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		f.Close()
		p.exited, p.exitErr = time.Now(), err
		if st := cmd.ProcessState; st != nil {
			p.cpu = st.UserTime() + st.SystemTime()
		}
		close(p.done)
	}()
	return p, nil
}

// waitReady polls /readyz every interval until it answers 200, as a
// readiness probe does, for at most timeout.
func (p *proc) waitReady(ctx context.Context, interval, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if readyz(ctx, p.admin+"/readyz") {
			p.ready = time.Now()
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("worker %s exited before it was ready (%v); its log: %s", p.name, p.exitErr, p.logPath)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("worker %s not ready within %s; its log: %s", p.name, timeout, p.logPath)
		}
	}
}

func readyz(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// terminate sends SIGTERM, and SIGKILL once grace has passed without an
// exit (terminationGracePeriodSeconds); it does not wait.
func (p *proc) terminate(grace time.Duration) {
	p.termAt = time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
		}
	}()
}

// killed reports whether the process ended by a signal rather than exiting
// (SIGKILL after the grace period).
func (p *proc) killed() bool {
	ee, ok := p.exitErr.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// runOnce runs bin with args to the end, for setup.
func runOnce(ctx context.Context, bin string, args ...string) error {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}
