// Package lab runs the worker as a process, for the load test (loadtest
// and its bench, ledger and rollout) and for the tests that need a real
// process (testenv.WorkerBinary, deploy's test, the fault suite): it
// builds the worker, starts it with its flags, environment, log and admin
// address, reads its /status and /readyz, stops it with SIGTERM and a
// grace period or kills it, and reads what /proc says of it and of the
// machine. It knows the worker by its command line and its admin pages
// only: it imports no package of cellttl.
package lab

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// workerPkg is the worker's main package: `go build` finds it from any
// directory of the module.
const workerPkg = "github.com/cellttl/cellttl/cmd/worker"

// Build builds the worker of this checkout into dir and returns the
// binary's path. The current directory must be within the module (the
// repository, or a test's package).
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, workerPkg).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the worker (from within the cellttl module): %v\n%s", err, out)
	}
	return bin, nil
}

// Run runs a worker command that ends by itself (setup), with env added
// to this process's environment; its error holds the command's output.
func Run(ctx context.Context, bin string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return nil
}

// FreeAddr returns an address of 127.0.0.1 whose port is free at the
// time of asking: for a process started next to listen on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
