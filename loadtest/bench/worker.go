package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"cloud.google.com/go/bigtable"
	"github.com/segmentio/kafka-go"

	"github.com/cellttl/cellttl/testkit/lab"
)

// buildWorker builds this checkout's worker into a new temporary
// directory, which remove removes.
func buildWorker(ctx context.Context) (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "cellttl-bench")
	if err != nil {
		return "", nil, err
	}
	if bin, err = lab.Build(ctx, dir); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// workerProc is a worker process the bench started.
type workerProc struct {
	*lab.Process
	pprof string // http://host:port of its profiles
	table string
}

// startWorker sets up a table of the topic's name and starts a worker on
// the topic.
func startWorker(ctx context.Context, bin string, brokers []string, tenantsFile, topic, flags string) (*workerProc, error) {
	table := topic
	common := []string{"--tenants", tenantsFile, "--table", table, "--log-level", "warn"}
	if err := lab.Run(ctx, bin, nil, append([]string{"setup"}, common...)...); err != nil {
		return nil, err
	}
	args := append([]string{"run", "--brokers", strings.Join(brokers, ","), "--topic", topic, "--group", topic}, common...)
	// Profiles: on a listener of their own where the build has
	// --pprof-addr; a --baseline-bin from before serves them on the
	// admin port.
	pprof := ""
	if help, _ := exec.CommandContext(ctx, bin, "run", "--help").CombinedOutput(); strings.Contains(string(help), "-pprof-addr") {
		addr, err := lab.FreeAddr()
		if err != nil {
			return nil, err
		}
		pprof = "http://" + addr
		args = append(args, "--pprof-addr", addr)
	}
	args = append(args, strings.Fields(flags)...)
	p, err := lab.Start(lab.Options{Bin: bin, Args: args, Log: os.Stderr})
	if err != nil {
		return nil, err
	}
	if pprof == "" {
		pprof = p.Admin
	}
	return &workerProc{Process: p, pprof: pprof, table: table}, nil
}

// stop stops the worker and deletes its table: the emulator never frees
// memory otherwise.
func (w *workerProc) stop(ctx context.Context) {
	_ = w.Stop(stopGrace)
	ac, err := bigtable.NewAdminClient(context.WithoutCancel(ctx), "local", "local")
	if err == nil {
		_ = ac.DeleteTable(context.WithoutCancel(ctx), w.table)
		_ = ac.DeleteTable(context.WithoutCancel(ctx), w.table+"-erasures") // worker setup made it
		ac.Close()
	}
}

// stopGrace is how long a stopped worker may take to drain before it is
// killed.
const stopGrace = 40 * time.Second

// benchWorker pre-produces the events, starts a worker on them, and times
// from its first write to its last. Its CPU time per event is counted from
// the moment it owns partitions (its start-up is not per event) to its
// last write. With profileDir set, it saves the worker's CPU profile of
// the run and its allocations.
func benchWorker(ctx context.Context, bin string, brokers []string, tenantsFile, name string, partitions int, msgs []kafka.Message, flags, profileDir string, profileSeconds int) (measured, error) {
	topic := name
	if err := lab.CreateTopic(ctx, brokers, topic, partitions, nil); err != nil {
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
	pid := w.Pid()
	var first, last time.Time
	var steady afterBurst
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
		if _, hwm, _, err := lab.Memory(pid); err == nil {
			peak = max(peak, hwm)
		}
		t, err := w.Status(ctx)
		if err != nil {
			continue
		}
		if t.Reading && cpu0 == 0 {
			if cpu0, err = lab.CPU(pid); err != nil {
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
		steady.observe(first, done)
		if done >= int64(len(msgs)) {
			last = time.Now()
			if cpu1, err = lab.CPU(pid); err != nil {
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
	return measured{rate: float64(len(msgs)) / last.Sub(first).Seconds(), steady: steady.rate(int64(len(msgs)), last),
		cpuPerEvent: perEvent(cpu1-cpu0, len(msgs)), rss: peak, cores: watch.shares()}, nil
}

// afterBurst measures the rate after a run's first seconds: a write cap's
// token bucket lets a second's worth through at once, then holds the cap.
type afterBurst struct {
	from time.Time
	done int64 // events done by then
}

const burstSettles = 2 * time.Second

// observe notes the events done so far in a run that began at first.
func (a *afterBurst) observe(first time.Time, done int64) {
	if !first.IsZero() && a.from.IsZero() && time.Since(first) >= burstSettles {
		a.from, a.done = time.Now(), done
	}
}

// rate is events/s from then until all total were done at last; 0 when
// the run ended sooner.
func (a *afterBurst) rate(total int64, last time.Time) float64 {
	if a.from.IsZero() || !last.After(a.from) {
		return 0
	}
	return float64(total-a.done) / last.Sub(a.from).Seconds()
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
