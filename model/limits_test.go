package model

import (
	"runtime"
	"strings"
	"testing"
)

// Model sizes are bounded by Validate, before anything is allocated (issue 13, item 8); the
// estimate matches what a model allocates.
func TestSizeLimits(t *testing.T) {
	base := DefaultConfig(512)
	m, err := New(base, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := base.NumParams(); got != int64(m.NumParams()) {
		t.Fatalf("NumParams estimate %d, model has %d", got, m.NumParams())
	}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Dim = 1 << 30 }, "dim 1073741824 exceeds the limit"},
		{func(c *Config) { c.Layers = 100_000_000 }, "layers 100000000 exceeds the limit"},
		{func(c *Config) { c.Hidden = 1 << 30 }, "hidden 1073741824 exceeds the limit"},
		{func(c *Config) { c.MaxSeq = 1 << 30 }, "max_seq 1073741824 exceeds the limit"},
		{func(c *Config) { c.Vocab = 1 << 30 }, "vocabulary size 1073741824 exceeds the limit"},
		{func(c *Config) { c.Dim, c.Hidden, c.Layers = 1<<14, 1<<16, 1<<10 }, "model.MaxParams"},
		// Within the limits, but more than any machine's memory: refused by the estimate.
		{func(c *Config) { c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads = 1<<12, 1<<14, 60, 32, 32 }, "memory estimate"},
	} {
		cfg := base
		c.edit(&cfg)
		if c.want == "memory estimate" && MachineMemory() > cfg.EstimateMemory(MemoryUse{}).Total() {
			t.Logf("this machine holds %d bytes: a 16 G parameter model fits", MachineMemory())
			continue
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := NewZero(cfg)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", cfg, err, c.want)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Errorf("%+v: refusing allocated %d bytes", cfg, d)
		}
	}
}
