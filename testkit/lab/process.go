package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

// Options say how to start a worker process.
type Options struct {
	Bin string
	// Args are the command (run) and its flags; Start adds --admin-addr.
	Args []string
	// Env is added to this process's environment.
	Env []string
	// Log takes the process's stdout and stderr; nil discards them.
	Log io.Writer
}

// Process is a worker process that Start started.
type Process struct {
	Admin   string // http://host:port of its admin server
	Started time.Time

	cmd    *exec.Cmd
	done   chan struct{}
	exited time.Time // set before done closes
	err    error     // set before done closes
}

// Start starts a worker, its admin server on a free port of 127.0.0.1.
func Start(o Options) (*Process, error) {
	admin, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Bin, append(slices.Clone(o.Args), "--admin-addr", admin)...)
	cmd.Env = append(os.Environ(), o.Env...)
	if o.Log != nil {
		cmd.Stdout, cmd.Stderr = o.Log, o.Log
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the worker: %w", err)
	}
	p := &Process{Admin: "http://" + admin, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.exited, p.err = time.Now(), err
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended, nil for exit status 0; Exited is when.
// Both hold once Done is closed.
func (p *Process) Err() error        { return p.err }
func (p *Process) Exited() time.Time { return p.exited }

// State is the exited process's state; nil while it runs.
func (p *Process) State() *os.ProcessState {
	select {
	case <-p.done:
		return p.cmd.ProcessState
	default:
		return nil
	}
}

// Killed reports whether the process ended by a signal rather than
// exiting (SIGKILL after the grace period).
func (p *Process) Killed() bool {
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// CPU is the CPU time the process has used: from /proc while it runs,
// from its resource usage once it has exited.
func (p *Process) CPU() (time.Duration, error) {
	if st := p.State(); st != nil {
		return st.UserTime() + st.SystemTime(), nil
	}
	return CPU(p.Pid())
}

// Signal sends sig; a process that has exited is left alone.
func (p *Process) Signal(sig os.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// Terminate sends SIGTERM, and SIGKILL once grace has passed without an
// exit (a pod's terminationGracePeriodSeconds); it does not wait.
func (p *Process) Terminate(grace time.Duration) {
	p.Signal(syscall.SIGTERM)
	go func() {
		select {
		case <-p.done:
		case <-time.After(grace):
			p.Signal(syscall.SIGKILL)
		}
	}()
}

// Stop terminates the process and waits for it: how it ended (Killed
// tells whether grace ran out).
func (p *Process) Stop(grace time.Duration) error {
	p.Terminate(grace)
	<-p.done
	return p.err
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Ready reports whether the worker's /readyz answers 200 within a second.
func (p *Process) Ready(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.Admin+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady asks /readyz every interval until it answers 200, as a
// readiness probe does, for at most timeout.
func (p *Process) WaitReady(ctx context.Context, interval, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !p.Ready(ctx) {
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready (%v)", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s", timeout)
		}
	}
	return nil
}

// Status reads the worker's brief /status page.
func (p *Process) Status(ctx context.Context) (Status, error) {
	return FetchStatus(ctx, p.Admin+"/status?tenants=false")
}
