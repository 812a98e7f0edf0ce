package metrics

import (
	"os/exec"
	"runtime"
	"testing"
)

func TestCollect(t *testing.T) {
	s := &Sampler{}
	first := s.Collect()
	// A child's CPU time counts once it is reaped (as envd's children's do).
	if err := exec.Command("sh", "-c", `i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done`).Run(); err != nil {
		t.Fatal(err)
	}
	m := s.Collect()
	if m.CPUTimeMs < first.CPUTimeMs+100 {
		t.Fatalf("a busy child's time is not counted: %d then %d ms", first.CPUTimeMs, m.CPUTimeMs)
	}
	if m.CPUCount != runtime.NumCPU() || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Fatalf("cpu: %+v", m)
	}
	if m.MemTotal == 0 || m.MemUsed > m.MemTotal || m.MemTotalMiB != m.MemTotal>>20 || m.DiskTotal == 0 || m.DiskUsed > m.DiskTotal {
		t.Fatalf("memory and disk: %+v", m)
	}
}
