package local

import (
	"runtime"
	"strings"
	"testing"
)

// The memory ceiling (issue 13, item 8): an engine at the largest accepted slot count allocates
// within its documented bound (model.Config.KVCacheBytes for the cache, plus the weights' copy
// and a row of logits a slot), and a larger one is refused before it allocates.
func TestEngineMemoryCeiling(t *testing.T) {
	m := tinyModel(t, 1)
	const maxLen = 64
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, err := NewEngine(m, 0, EngineConfig{Slots: MaxSlots, MaxLen: maxLen})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	runtime.ReadMemStats(&after)
	bound := uint64(m.Cfg.KVCacheBytes(MaxSlots, maxLen)) + 4*uint64(m.NumParams())*4 + 8*uint64(MaxSlots*m.Cfg.Vocab) + 16<<20
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Fatalf("an engine of %d slots allocated %d bytes, over its bound of %d", MaxSlots, got, bound)
	}

	for _, c := range []struct {
		cfg  EngineConfig
		want string
	}{
		{EngineConfig{Slots: MaxSlots + 1}, "local.MaxSlots"},
		{EngineConfig{Slots: 100_000_000}, "local.MaxSlots"},
	} {
		runtime.ReadMemStats(&before)
		_, err := NewEngine(m, 0, c.cfg)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("slots %d: err = %v, want %q", c.cfg.Slots, err, c.want)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Fatalf("refusing %d slots allocated %d bytes", c.cfg.Slots, got)
		}
	}
	big := m.Cfg
	big.Layers, big.MaxSeq = 64, 1<<17
	if err := CheckSize(big, EngineConfig{Slots: MaxSlots}); err == nil || !strings.Contains(err.Error(), "local.MaxCacheBytes") {
		t.Fatalf("a %d-byte cache: err = %v", big.KVCacheBytes(MaxSlots, big.MaxSeq), err)
	}
}
