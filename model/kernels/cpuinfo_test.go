package kernels

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSysfsCaches parses a sysfs cache directory like Linux's (an instruction cache skipped,
// sizes in K and M, CPU lists with ranges and commas).
func TestSysfsCaches(t *testing.T) {
	dir := t.TempDir()
	for i, c := range []struct{ level, typ, size, shared string }{
		{"1", "Data", "48K", "0"},
		{"1", "Instruction", "64K", "0"},
		{"2", "Unified", "2048K", "0"},
		{"3", "Unified", "32M", "0-3,8,10-11"},
	} {
		d := filepath.Join(dir, "index"+string(rune('0'+i)))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"level": c.level, "type": c.typ, "size": c.size, "shared_cpu_list": c.shared} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, ok := sysfsCaches(dir)
	want := CPUInfo{L1D: 48 << 10, L2: 2 << 20, L2Sharing: 1, L3: 32 << 20, L3Sharing: 7, Source: "sysfs"}
	if !ok || got != want {
		t.Fatalf("sysfsCaches = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := sysfsCaches(filepath.Join(dir, "missing")); ok {
		t.Fatal("a missing directory parsed")
	}
}

// TestCPU: whatever the source, this machine reports a model name and plausible caches.
func TestCPU(t *testing.T) {
	c := CPU()
	t.Logf("%s", c)
	if c.Model == "" || c.L1D < 4<<10 || c.L1D > 4<<20 || (c.L2 != 0 && c.L2 < c.L1D) {
		t.Fatalf("implausible CPU info %+v", c)
	}
	if s, ok := cpuidCaches(); ok {
		t.Logf("cpuid: %+v", s)
	}
	if testing.Short() {
		return
	}
	t.Logf("measured: %+v", measureCaches())
}

// TestReadBandwidth: the read kernels sum what they read, and the measurement gives a rate.
func TestReadBandwidth(t *testing.T) {
	for _, e := range availableElemKernels() {
		for _, n := range []int{0, 1, 7, 128, 129, 1000, 4096 + 3} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(i % 5)
			}
			var want float32
			for _, v := range x {
				want += v
			}
			if got := e.read(x); got != want {
				t.Fatalf("%s: read of %d floats = %v, want %v", e.name, n, got, want)
			}
		}
	}
	if r := ReadBandwidth(1<<20, time.Millisecond); !(r > 1e8) {
		t.Fatalf("ReadBandwidth(1 MiB) = %g bytes/s", r)
	}
}

// TestDeriveBlocks: the blocks follow the caches (the rule in blocks.go), and reproduce the
// mc measured best on Zen 4.
func TestDeriveBlocks(t *testing.T) {
	for _, c := range []struct {
		name           string
		cpu            CPUInfo
		nw             int
		mr, nr, kc     int
		wantMC, wantNC int
	}{
		{"Zen 4, 1 MiB L2, 32 MiB L3 for 8", CPUInfo{L1D: 32 << 10, L2: 1 << 20, L3: 32 << 20, L3Sharing: 8}, 2, 12, 32, 384, 96, 2720},
		{"Emerald Rapids VM", CPUInfo{L1D: 48 << 10, L2: 2 << 20, L3: 480 << 20, L3Sharing: 2}, 2, 12, 32, 384, 192, 4096},
		{"L2 shared by two", CPUInfo{L1D: 32 << 10, L2: 2 << 20, L2Sharing: 2, L3: 8 << 20, L3Sharing: 8}, 8, 6, 16, 384, 96, 2720},
		{"no L3", CPUInfo{L1D: 64 << 10, L2: 4 << 20}, 4, 4, 4, 256, 256, 1024},
		{"nothing but an L1", CPUInfo{L1D: 32 << 10}, 1, 12, 32, 384, 48, 128},
	} {
		mc, nc := deriveBlocks(c.mr, c.nr, c.kc, c.cpu, c.nw)
		if mc != c.wantMC || nc != c.wantNC {
			t.Errorf("%s: mc, nc = %d, %d; want %d, %d", c.name, mc, nc, c.wantMC, c.wantNC)
		}
		if mc%c.mr != 0 || nc%c.nr != 0 {
			t.Errorf("%s: blocks %d, %d are not whole tiles", c.name, mc, nc)
		}
	}
}
