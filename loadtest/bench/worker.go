package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/cellttl/cellttl/loadtest/drive"
	"github.com/segmentio/kafka-go"
)

func buildWorker(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "cellttl-bench")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "worker")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/worker").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the worker (run from the repository root): %v\n%s", err, out)
	}
	return bin, nil
}

// workerProc is a worker process the bench started.
type workerProc struct {
	cmd   *exec.Cmd
	admin string // http://host:port of its admin server
	pprof string // http://host:port of its profiles
	table string
}

// startWorker sets up a table of the topic's name and starts a worker on
// the topic.
func startWorker(ctx context.Context, bin string, brokers []string, tenantsFile, topic, flags string) (*workerProc, error) {
	table := topic
	common := []string{"--tenants", tenantsFile, "--table", table, "--log-level", "warn"}
	if out, err := exec.CommandContext(ctx, bin, append([]string{"setup"}, common...)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("worker setup: %v\n%s", err, out)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	args := append([]string{"run", "--brokers", strings.Join(brokers, ","), "--topic", topic, "--group", topic, "--admin-addr", admin}, common...)
	// Profiles: on a listener of their own where the build has
	// --pprof-addr; a --baseline-bin from before serves them on the
	// admin port.
	pprof := admin
	if help, _ := exec.CommandContext(ctx, bin, "run", "--help").CombinedOutput(); strings.Contains(string(help), "-pprof-addr") {
		pp, err := FreePort()
		if err != nil {
			return nil, err
		}
		pprof = fmt.Sprintf("127.0.0.1:%d", pp)
		args = append(args, "--pprof-addr", pprof)
	}
	args = append(args, strings.Fields(flags)...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &workerProc{cmd: cmd, admin: "http://" + admin, pprof: "http://" + pprof, table: table}, nil
}

// stop stops the worker and deletes its table: the emulator never frees
// memory otherwise.
func (w *workerProc) stop(ctx context.Context) {
	if w.cmd != nil { // nil: waited for already
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		_ = w.cmd.Wait()
	}
	ac, err := bigtable.NewAdminClient(context.WithoutCancel(ctx), "local", "local")
	if err == nil {
		_ = ac.DeleteTable(context.WithoutCancel(ctx), w.table)
		_ = ac.DeleteTable(context.WithoutCancel(ctx), w.table+"-erasures") // worker setup made it
		ac.Close()
	}
}

// benchWorker pre-produces the events, starts a worker on them, and times
// from its first write to its last. Its CPU time per event is counted from
// the moment it owns partitions (its start-up is not per event) to its
// last write. With profileDir set, it saves the worker's CPU profile of
// the run and its allocations.
func benchWorker(ctx context.Context, bin string, brokers []string, tenantsFile, name string, partitions int, msgs []kafka.Message, flags, profileDir string, profileSeconds int) (measured, error) {
	topic := name
	if err := createTopic(brokers, topic, partitions); err != nil {
		return measured{}, err
	}
	if err := produceAll(ctx, brokers, topic, msgs); err != nil {
		return measured{}, err
	}
	w, err := startWorker(ctx, bin, brokers, tenantsFile, topic, flags)
	if err != nil {
		return measured{}, err
	}
	defer w.stop(ctx)
	pid := w.cmd.Process.Pid
	var first, last time.Time
	var cpu0, cpu1 time.Duration
	var peak int64
	var profiled chan error
	var watch *cpuWatch
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		// Each look at /status costs the worker CPU, which counts in its
		// CPU per event: the brief page (a few hundred µs, where the full
		// one takes 15 ms with 10,000 tenants), often enough to time the
		// run, seldom enough to cost it about 1%.
		time.Sleep(25 * time.Millisecond)
		peak = max(peak, rss(pid))
		t, err := drive.FetchStatus(ctx, w.admin+"/status?tenants=false")
		if err != nil {
			continue
		}
		if t.Reading && cpu0 == 0 {
			if cpu0, err = ProcCPU(pid); err != nil {
				return measured{}, err
			}
			watch = watchCPU(pid)
			if profileDir != "" {
				profiled = make(chan error, 1)
				go func() {
					profiled <- saveProfile(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", w.pprof, profileSeconds), filepath.Join(profileDir, "worker-cpu.pprof"))
				}()
			}
		}
		done := t.Written + t.Dead + t.Expired
		if done > 0 && first.IsZero() {
			first = time.Now()
		}
		if done >= int64(len(msgs)) {
			last = time.Now()
			if cpu1, err = ProcCPU(pid); err != nil {
				return measured{}, err
			}
			if watch == nil { // done before it was seen reading
				watch = watchCPU(pid)
			}
			break
		}
	}
	if last.IsZero() {
		return measured{}, fmt.Errorf("the worker did not write all %d events", len(msgs))
	}
	if profiled != nil {
		if err := errors.Join(<-profiled, saveProfile(ctx, w.pprof+"/debug/pprof/allocs", filepath.Join(profileDir, "worker-allocs.pprof"))); err != nil {
			return measured{}, err
		}
	}
	return measured{rate: float64(len(msgs)) / last.Sub(first).Seconds(), cpuPerEvent: perEvent(cpu1-cpu0, len(msgs)), rss: peak, cores: watch.shares()}, nil
}

// saveProfile fetches a profile from the worker's admin server into file.
func saveProfile(ctx context.Context, url, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("profile %s: %w", url, err)
	}
	return os.WriteFile(file, data, 0o644)
}

// rss returns the process's peak resident set size in bytes (Linux).
func rss(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of asking: for
// a process started next to listen on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
