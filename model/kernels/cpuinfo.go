package kernels

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPUInfo describes the processor and data caches the kernels size their work by (Blocking):
// the cache sizes come from the operating system (Linux sysfs), else from the CPUID instruction
// (amd64), else from a measurement of read speed over growing buffers.
type CPUInfo struct {
	Model string // the processor's name, or GOOS/GOARCH where none is reported
	// L1D, L2 and L3 are the bytes of one data (or unified) cache of each level; 0 where the
	// level does not exist or was not found.
	L1D, L2, L3 int
	// L2Sharing and L3Sharing are the logical CPUs that share one such cache (0: unknown).
	L2Sharing, L3Sharing int
	Source               string // "sysfs", "cpuid", "measured" or "default"
}

// String is the CPU's name and its caches, as `agentrl bench model` prints them with each figure.
func (c CPUInfo) String() string {
	level := func(name string, size, sharing int) string {
		if size == 0 {
			return ""
		}
		s := fmt.Sprintf(", %s %s", name, byteSize(size))
		if sharing > 1 {
			s += fmt.Sprintf(" shared by %d CPUs", sharing)
		}
		return s
	}
	return fmt.Sprintf("%s (%d CPUs): L1d %s%s%s (%s)", c.Model, runtime.NumCPU(), byteSize(c.L1D),
		level("L2", c.L2, c.L2Sharing), level("L3", c.L3, c.L3Sharing), c.Source)
}

func byteSize(b int) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%d KiB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

var (
	cpuOnce sync.Once
	cpuInfo CPUInfo
)

// CPU reports this machine's processor and caches; the first call finds them (and only where
// neither the operating system nor CPUID tells, measures them, in about 0.1 s).
func CPU() CPUInfo {
	cpuOnce.Do(func() { cpuInfo = detectCPU() })
	return cpuInfo
}

func detectCPU() CPUInfo {
	c, ok := sysfsCaches("/sys/devices/system/cpu/cpu0/cache")
	if !ok {
		c, ok = cpuidCaches()
	}
	if !ok {
		c = measureCaches()
	}
	c.Model = cpuModel()
	return c
}

// sysfsCaches reads Linux's description of cpu0's caches.
func sysfsCaches(dir string) (CPUInfo, bool) {
	var c CPUInfo
	idx, _ := filepath.Glob(filepath.Join(dir, "index*"))
	for _, d := range idx {
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(d, name))
			if err != nil {
				return ""
			}
			return strings.TrimSpace(string(b))
		}
		typ := read("type")
		if typ != "Data" && typ != "Unified" {
			continue
		}
		level, err1 := strconv.Atoi(read("level"))
		size, err2 := parseCacheSize(read("size"))
		if err1 != nil || err2 != nil {
			continue
		}
		c.set(level, size, cpuListLen(read("shared_cpu_list")))
	}
	if c.L1D == 0 {
		return CPUInfo{}, false
	}
	c.Source = "sysfs"
	return c, true
}

func (c *CPUInfo) set(level, size, sharing int) {
	switch level {
	case 1:
		c.L1D = size
	case 2:
		c.L2, c.L2Sharing = size, sharing
	case 3:
		c.L3, c.L3Sharing = size, sharing
	}
}

// parseCacheSize reads sysfs sizes such as "48K", "2048K" or "32M".
func parseCacheSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("kernels: cache size %q", s)
	}
	return n * mult, nil
}

// cpuListLen counts the CPUs of a list such as "0-1" or "0,4,8-11" (0 if it does not parse).
func cpuListLen(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// cpuModel is the processor's name from /proc/cpuinfo (or, on arm64, its implementer and part
// numbers there) or CPUID, else GOOS/GOARCH.
func cpuModel() string {
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		fields := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if _, seen := fields[k]; ok && !seen && v != "" {
				fields[k] = v
			}
		}
		if m := fields["model name"]; m != "" {
			return m
		}
		// arm64 Linux names no model: its implementer and part numbers identify the core.
		if fields["CPU implementer"] != "" && fields["CPU part"] != "" {
			return fmt.Sprintf("%s CPU implementer %s part %s", runtime.GOARCH, fields["CPU implementer"], fields["CPU part"])
		}
	}
	if s := cpuidBrand(); s != "" {
		return s
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// measureCaches finds the cache sizes from the read speed of one core over buffers of 8 KiB to
// 64 MiB in steps of √2: the speed falls where a buffer outgrows a level, and each fall below
// two thirds of the best speed on the plateau since the previous fall marks a level at the size
// before it. It errs small (a level counts as full a little before it is), and a level it
// cannot see keeps the default.
func measureCaches() CPUInfo {
	c := CPUInfo{L1D: 32 << 10, L2: 1 << 20, L3: 8 << 20, Source: "default"}
	buf := make([]float32, (64<<20)/4)
	for i := range buf {
		buf[i] = 1
	}
	read := activeElem().read
	var sink float32
	defer runtime.KeepAlive(&sink)
	var sizes []int
	var rates []float64
	for step := 0; ; step++ {
		size := (8 << 10) << (step / 2)
		if step%2 == 1 {
			size = size * 181 / 128 / 512 * 512 // ·√2, whole 512-byte blocks
		}
		if size > len(buf)*4 {
			break
		}
		x := buf[:size/4]
		read(x)
		best := 0.0
		for range 3 {
			reps := max(1, (4<<20)/size)
			t0 := time.Now()
			for range reps {
				sink += read(x)
			}
			if d := time.Since(t0).Seconds(); d > 0 {
				best = max(best, float64(size*reps)/d)
			}
		}
		sizes, rates = append(sizes, size), append(rates, best)
	}
	level := 0
	peak := rates[0]
	for i := 1; i < len(rates) && level < 3; i++ {
		if rates[i] < peak*2/3 {
			level++
			c.set(level, sizes[i-1], 0)
			c.Source = "measured"
			for i+1 < len(rates) && rates[i+1] < rates[i]*9/10 {
				i++ // still falling: the next plateau starts where the fall ends
			}
			peak = rates[i]
			continue
		}
		peak = max(peak, rates[i])
	}
	return c
}
