// Package metrics samples the sandbox as its processes see it, for GET /metrics.
package metrics

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Metrics is GET /metrics's answer: one sample of the sandbox as its processes see it (EnvdMetrics in
// @aenv/protocol). CPU comes from the processes' own accounting, not /proc/stat: under gVisor
// /proc/stat's cpu line is all zeros, and the host's cgroup counts the sentry's housekeeping too
// (an idle desktop costs the host 10-15 % of a core while its processes use under 1 %).
type Metrics struct {
	Ts          int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	CPUTimeMs   uint64  `json:"cpu_time_ms"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux and gVisor).
const clockTicks = 100

// Sampler takes the samples; it remembers the last one's CPU time, which the next one's
// CPU share is measured from.
type Sampler struct {
	mu sync.Mutex
	at time.Time
	ms uint64
}

// taskCPUMs is the CPU time the sandbox's processes have used, in ms: every live process's user
// and system time plus what its reaped children used. Orphans are re-parented to init, which
// reaps them, so an exited process's time stays counted. envd's own time is left out (serving
// this request, or a transfer, is the host's doing), its children's is not.
func taskCPUMs() uint64 {
	self := os.Getpid()
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks uint64
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		s := string(b)
		end := strings.LastIndexByte(s, ')')
		if end < 0 {
			continue
		}
		// After "pid (comm) ": state is field 3; utime, stime, cutime, cstime are 14-17.
		f := strings.Fields(s[end+1:])
		if len(f) < 15 {
			continue
		}
		first := 11 // utime's index in f
		if pid, _ := strconv.Atoi(strings.TrimSpace(s[:strings.IndexByte(s, ' ')])); pid == self {
			first = 13 // cutime: envd's children only
		}
		for i := first; i < 15; i++ {
			v, _ := strconv.ParseUint(f[i], 10, 64)
			ticks += v
		}
	}
	return ticks * 1000 / clockTicks
}

// cpuUsedPct is the share of the sandbox's CPUs its processes used since the last sample (the
// first sample measures 100 ms).
func (s *Sampler) cpuUsedPct(nowMs uint64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.at.IsZero() {
		s.at, s.ms = now, nowMs
		time.Sleep(100 * time.Millisecond)
		now, nowMs = time.Now(), taskCPUMs()
	}
	wall := now.Sub(s.at).Milliseconds()
	used := int64(nowMs) - int64(s.ms)
	s.at, s.ms = now, nowMs
	if wall <= 0 || used <= 0 {
		return 0
	}
	pct := float64(used) / float64(wall) / float64(runtime.NumCPU()) * 100
	if pct > 100 {
		pct = 100
	}
	return float64(int(pct*100+0.5)) / 100
}

// Collect takes one sample.
func (s *Sampler) Collect() Metrics {
	m := Metrics{Ts: time.Now().Unix(), CPUCount: runtime.NumCPU()}
	m.CPUTimeMs = taskCPUMs()
	m.CPUUsedPct = s.cpuUsedPct(m.CPUTimeMs)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		kb := map[string]uint64{}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				kb[strings.TrimSuffix(f[0], ":")] = v * 1024
			}
		}
		avail, ok := kb["MemAvailable"]
		if !ok {
			avail = kb["MemFree"]
		}
		m.MemTotal = kb["MemTotal"]
		if m.MemTotal > avail {
			m.MemUsed = m.MemTotal - avail
		}
		m.MemCache = kb["Cached"] + kb["Buffers"]
		m.MemTotalMiB, m.MemUsedMiB = m.MemTotal>>20, m.MemUsed>>20
	}
	var st syscall.Statfs_t
	if syscall.Statfs("/", &st) == nil {
		m.DiskTotal = st.Blocks * uint64(st.Bsize)
		m.DiskUsed = (st.Blocks - st.Bfree) * uint64(st.Bsize)
	}
	return m
}
