package rollout

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cellttl/cellttl/testkit/lab"
)

// proc is one worker process: a pod of the Deployment.
type proc struct {
	*lab.Process
	name    string
	logPath string
	ready   time.Time
	termAt  time.Time // SIGTERM sent
}

// startWorker starts `worker run` of bin in the group, its log (JSON, info)
// in dir/<name>.log.
func startWorker(bin, dir, name string, args []string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args = append([]string{"run", "--log-format", "json", "--log-level", "info"}, args...)
	p, err := lab.Start(lab.Options{Bin: bin, Args: args, Log: f})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start worker %s: %w", name, err)
	}
	go func() { <-p.Done(); f.Close() }()
	return &proc{Process: p, name: name, logPath: logPath}, nil
}

// waitReady polls /readyz every interval until it answers 200, as a
// readiness probe does, for at most timeout.
func (p *proc) waitReady(ctx context.Context, interval, timeout time.Duration) error {
	if err := p.WaitReady(ctx, interval, timeout); err != nil {
		return fmt.Errorf("worker %s %w; its log: %s", p.name, err, p.logPath)
	}
	p.ready = time.Now()
	return nil
}

// terminate sends SIGTERM, and SIGKILL once grace has passed without an
// exit (terminationGracePeriodSeconds); it does not wait.
func (p *proc) terminate(grace time.Duration) {
	p.termAt = time.Now()
	p.Terminate(grace)
}
