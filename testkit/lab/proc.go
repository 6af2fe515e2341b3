package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// What /proc says (Linux), through procfs: the one reader of it for the
// load test and the tests.

// CPU is the CPU time (user and system, all threads) process pid has
// used, to the kernel's tick of 10 ms.
func CPU(pid int) (time.Duration, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(st.CPUTime() * float64(time.Second)).Round(10 * time.Millisecond), nil
}

// Memory is process pid's resident set, its peak (its high-water mark:
// VmRSS and VmHWM), and the part of the resident set that is its own:
// anonymous and shared pages (RssAnon and RssShmem), not the pages of its
// binary (RssFile), which grow with the code, are shared and clean, and
// which the kernel reclaims before it kills. In bytes.
func Memory(pid int) (rss, peak, own int64, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, 0, err
	}
	return int64(st.VmRSS), int64(st.VmHWM), int64(st.RssAnon + st.RssShmem), nil
}

// LoadAverage is the machine's load average over the last minute.
func LoadAverage() (float64, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return 0, err
	}
	return l.Load1, nil
}

// Cores is the time, in seconds since boot, the machine's cores have
// spent busy and in all: idle and iowait are not busy; guest time is in
// user time already.
func Cores() (busy, total float64, err error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, 0, err
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0, err
	}
	c := st.CPUTotal
	busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return busy, busy + c.Idle + c.Iowait, nil
}

// SelfCPU is the CPU time (user and system) this process has used, from
// its resource usage (to the microsecond).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ServicePid is the pid scripts/services.sh wrote for service (kafka,
// emulator) in TESTENV_SERVICES_DIR (.services by default); 0 when there
// is none.
func ServicePid(service string) int {
	dir := os.Getenv("TESTENV_SERVICES_DIR")
	if dir == "" {
		dir = ".services"
	}
	data, err := os.ReadFile(filepath.Join(dir, service+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}
