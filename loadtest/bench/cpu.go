package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SelfCPU is the CPU time (user + system) this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// userHZ is the unit of /proc/PID/stat's times: 100 on every Linux the
// worker runs on (it is part of the kernel's ABI, not a build option).
const userHZ = 100

// ProcCPU is the CPU time (user + system, all threads) process pid has
// used, to 10 ms (Linux).
func ProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: count the fields
	// from after it. utime and stime are the stat's 14th and 15th.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// perEvent is CPU time per event, in microseconds.
func perEvent(cpu time.Duration, events int) float64 {
	return float64(cpu.Microseconds()) / float64(events)
}
