package pipeline

import (
	"strings"
	"testing"
)

func TestMonitorNamesTheBrokenInvariant(t *testing.T) {
	mo := newMonitor(MonitorConfig{MinEntropy: 0.1, MaxZeroVarShare: 0.8, MaxKL: 0.05})
	cases := []struct {
		m    map[string]any
		want []string
	}{
		{map[string]any{"explore/entropy": 0.5, "signal/effective_batch": 10, "signal/zero_var_share": 0.2, "shift/behaviour_kl": 0.001}, nil},
		{map[string]any{"explore/entropy": 0.01, "signal/effective_batch": 10}, []string{"exploration"}},
		{map[string]any{"explore/entropy": 0.0}, nil}, // nothing trained: no entropy was measured
		{map[string]any{"signal/zero_var_share": 0.95}, []string{"learning signal"}},
		{map[string]any{"shift/behaviour_kl": 0.2, "signal/zero_var_share": 1.0}, []string{"learning signal", "distribution shift"}},
	}
	for i, c := range cases {
		got := mo.check(c.m)
		if len(got) != len(c.want) {
			t.Fatalf("case %d: warnings %q, want %d naming %v", i, got, len(c.want), c.want)
		}
		for j, w := range c.want {
			if !strings.Contains(got[j], w) {
				t.Fatalf("case %d: warning %q does not name %q", i, got[j], w)
			}
		}
	}
}
