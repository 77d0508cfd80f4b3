package tool

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// BenchmarkSandboxRun measures one python tool call end to end (bwrap set-up, interpreter
// start, limits, a print, teardown) and reports the median and 90th percentile in ms.
func BenchmarkSandboxRun(b *testing.B) {
	sb := newTestSandbox(b, DefaultSandboxLimits())
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		res, err := sb.Run(context.Background(), "print(1 + 1)")
		lat = append(lat, time.Since(start))
		if err != nil || res.Stdout != "2\n" {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
	reportPercentiles(b, lat)
}

// BenchmarkBareInterpreter is the floor the sandbox adds to: the same interpreter started
// directly on a constant program (trusted code, no sandbox).
func BenchmarkBareInterpreter(b *testing.B) {
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		out, err := exec.Command(DefaultPython, "-I", "-B", "-c", "print(1 + 1)").Output()
		lat = append(lat, time.Since(start))
		if err != nil || string(out) != "2\n" {
			b.Fatalf("run: %v %q", err, out)
		}
	}
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.9), "p90-ms")
}
