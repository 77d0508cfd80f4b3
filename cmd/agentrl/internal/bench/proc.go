package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// peakRSS reads the process's peak resident set size (VmHWM) in bytes from /proc/self/status.
func peakRSS() (int64, error) { return procStatus("VmHWM:") }

// procStatus reads a size field of /proc/self/status, such as "VmRSS:", in bytes.
func procStatus(field string) (int64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("process memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process memory: parse %s %q: %w", field, v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("process memory: no %s in /proc/self/status", field)
}
