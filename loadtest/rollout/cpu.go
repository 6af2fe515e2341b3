package rollout

import (
	"fmt"
	"runtime"
	"time"

	"github.com/cellttl/cellttl/testkit/lab"
)

// cpuUse is how the machine's cores were used while the load ran: by the
// run's workers, the broker, the emulator, this harness, and whatever
// else runs on the machine. The cores are shared (other engineers' builds
// and tests): a stretch measured on a busy machine says so beside it.
type cpuUse struct {
	cores                                  int
	busy                                   float64 // cores busy on average
	workers, broker, emulator, harness     float64 // cores on average
	brokerKnown, emulatorKnown, machineSet bool
}

func (c cpuUse) String() string {
	if !c.machineSet {
		return "unknown (no /proc/stat)"
	}
	rest := c.busy - c.workers - c.broker - c.emulator - c.harness
	s := fmt.Sprintf("%.2f of %d cores busy on average: the workers %.2f", c.busy, c.cores, c.workers)
	if c.brokerKnown {
		s += fmt.Sprintf(", the broker %.2f", c.broker)
	}
	if c.emulatorKnown {
		s += fmt.Sprintf(", the emulator %.2f", c.emulator)
	}
	s += fmt.Sprintf(", this harness %.2f, anything else %.2f", c.harness, max(rest, 0))
	if !c.brokerKnown || !c.emulatorKnown {
		s += " (with the services whose pid is not in TESTENV_SERVICES_DIR)"
	}
	return s
}

// cpuMark is the CPU counters at one moment.
type cpuMark struct {
	at             time.Time
	busy, total    float64 // seconds of every core, busy and in all (lab.Cores)
	machineSet     bool
	broker, emul   time.Duration
	brokerPid      int
	emulPid        int
	harness        time.Duration
	workersRunning map[*proc]time.Duration
}

// markCPU reads the counters; the broker's and the emulator's pids come
// from scripts/services.sh's directory.
func markCPU(procs []*proc) cpuMark {
	m := cpuMark{at: time.Now(), harness: lab.SelfCPU(), workersRunning: map[*proc]time.Duration{}}
	busy, total, err := lab.Cores()
	m.busy, m.total, m.machineSet = busy, total, err == nil
	m.brokerPid, m.broker = serviceCPU("kafka")
	m.emulPid, m.emul = serviceCPU("emulator")
	for _, p := range procs {
		select {
		case <-p.Done():
		default:
			if c, err := lab.CPU(p.Pid()); err == nil {
				m.workersRunning[p] = c
			}
		}
	}
	return m
}

// cpuBetween is the use of the cores from start to end, procs being every
// worker of the run: one that exited meanwhile counts to its exit.
func cpuBetween(start, end cpuMark, procs []*proc) cpuUse {
	wall := end.at.Sub(start.at).Seconds()
	u := cpuUse{cores: runtime.NumCPU(), machineSet: start.machineSet && end.machineSet}
	if u.machineSet && end.total > start.total {
		u.busy = (end.busy - start.busy) / (end.total - start.total) * float64(u.cores)
	}
	var workers time.Duration
	for _, p := range procs {
		last, running := end.workersRunning[p]
		if !running {
			select {
			case <-p.Done():
				last, _ = p.CPU() // to its exit
			default:
				continue
			}
		}
		workers += last - start.workersRunning[p] // 0 for one started since
	}
	u.workers = workers.Seconds() / wall
	u.harness = (end.harness - start.harness).Seconds() / wall
	if start.brokerPid != 0 && start.brokerPid == end.brokerPid {
		u.broker, u.brokerKnown = (end.broker-start.broker).Seconds()/wall, true
	}
	if start.emulPid != 0 && start.emulPid == end.emulPid {
		u.emulator, u.emulatorKnown = (end.emul-start.emul).Seconds()/wall, true
	}
	return u
}

// serviceCPU is a service's pid and its CPU time; 0, 0 when either
// cannot be read.
func serviceCPU(service string) (int, time.Duration) {
	pid := lab.ServicePid(service)
	if pid == 0 {
		return 0, 0
	}
	c, err := lab.CPU(pid)
	if err != nil {
		return 0, 0
	}
	return pid, c
}
