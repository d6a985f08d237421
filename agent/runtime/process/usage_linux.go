//go:build linux

package process

import (
	"bytes"
	"os"
	"strconv"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, which
// the kernel fixes at 100 for user space on every common architecture
// (sysconf(_SC_CLK_TCK) would say so, but needs cgo).
const userHZ = 100

const usageSupported = true

// pageSize is the unit of the resident set in /proc/<pid>/stat.
var pageSize = uint64(os.Getpagesize())

// groupUsage reads /proc once and returns, per process group, the CPU
// time its processes used (utime + stime) plus that of their children
// which have exited and been waited for (cutime + cstime), in seconds, and
// the sum of their resident sets (rss), in bytes. Processes that vanish
// while it reads are skipped.
func groupUsage() map[int]usage {
	out := map[int]usage{}
	d, err := os.Open("/proc")
	if err != nil {
		return out
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return out
	}
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		if pgrp, ticks, rss, ok := parseStat(b); ok {
			u := out[pgrp]
			u.cpuSeconds += float64(ticks) / userHZ
			u.memoryBytes += rss * pageSize
			out[pgrp] = u
		}
	}
	return out
}

// parseStat reads the process group, the CPU ticks (utime, stime, cutime,
// cstime) and the resident set in pages (rss) of a /proc/<pid>/stat line.
// The command name, in parentheses, may hold spaces and parentheses
// itself, so the fields are counted from the last ')'.
func parseStat(b []byte) (pgrp int, ticks, rss uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	// After the name: state ppid pgrp session tty_nr tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// num_threads itrealvalue starttime vsize rss ...
	f := bytes.Fields(b[i+1:])
	if len(f) < 22 {
		return 0, 0, 0, false
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, 0, false
	}
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseInt(string(f[k]), 10, 64)
		if err != nil || v < 0 {
			return 0, 0, 0, false
		}
		ticks += uint64(v)
	}
	v, err := strconv.ParseInt(string(f[21]), 10, 64)
	if err != nil {
		return 0, 0, 0, false
	}
	// A kernel thread or a process being torn down reports 0; nothing is
	// ever negative but a corrupt line.
	return pgrp, ticks, uint64(max(v, 0)), true
}
