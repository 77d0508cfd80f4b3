package optim

import (
	"math"
	"testing"

	"github.com/agentrl/agentrl/model/kernels"
)

func TestScheduleLR(t *testing.T) {
	s := Schedule{PeakLR: 1e-3, MinLR: 1e-4, WarmupSteps: 10, TotalSteps: 110}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		step int
		want float64
	}{
		{0, 1e-4}, {4, 5e-4}, {9, 1e-3}, {10, 1e-3}, {60, 5.5e-4}, {110, 1e-4}, {500, 1e-4},
	} {
		if got := s.LR(tc.step); math.Abs(float64(got)-tc.want) > 1e-9 {
			t.Errorf("LR(%d) = %v, want %v", tc.step, got, tc.want)
		}
	}
	for i := 10; i < 110; i++ { // cosine part never rises
		if s.LR(i+1) > s.LR(i) {
			t.Fatalf("LR rises at %d", i)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, s := range []Schedule{
		{PeakLR: 0, TotalSteps: 1},
		{PeakLR: 1, MinLR: 2, TotalSteps: 1},
		{PeakLR: 1, WarmupSteps: 5, TotalSteps: 4},
		{PeakLR: float32(math.NaN()), TotalSteps: 1},
	} {
		if s.Validate() == nil {
			t.Errorf("%+v accepted", s)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	for _, tc := range []struct {
		g         []float32
		max       float32
		wantNorm  float32
		wantAfter float64
	}{
		{[]float32{3, 4}, 1, 5, 1},
		{[]float32{3, 4}, 10, 5, 5},
		{[]float32{3, 4}, 0, 5, 5},
	} {
		g := append([]float32(nil), tc.g...)
		if n := ClipGradNorm(g, tc.max); n != tc.wantNorm {
			t.Errorf("norm %v, want %v", n, tc.wantNorm)
		}
		if after := float64(GradNorm(g)); math.Abs(after-tc.wantAfter) > 1e-5 {
			t.Errorf("norm after clip %v, want %v", after, tc.wantAfter)
		}
	}
	g := []float32{float32(math.Inf(1)), 1}
	if n := ClipGradNorm(g, 1); !math.IsInf(float64(n), 1) || g[1] != 1 {
		t.Errorf("non-finite norm must be reported and leave grads alone: %v %v", n, g)
	}
}

func TestAdamWSegmentsAndState(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WeightDecay = 0.5
	segs := []Segment{{0, 2, true}, {2, 2, false}}
	o, err := NewAdamW(cfg, 4, segs)
	if err != nil {
		t.Fatal(err)
	}
	p := []float32{1, 1, 1, 1}
	zero := make([]float32, 4)
	if err := o.Step(p, zero, 0.1); err != nil {
		t.Fatal(err)
	}
	// Zero gradient: only decay moves the decayed segment, by the factor 1 − lr·wd.
	if want := float32(1 - 0.1*0.5); p[0] != want || p[1] != want || p[2] != 1 || p[3] != 1 {
		t.Fatalf("after decay-only step: %v", p)
	}
	// Restoring a saved state reproduces the next step exactly.
	g := []float32{0.3, -0.2, 0.1, 0.7}
	saved := o.State()
	p2 := append([]float32(nil), p...)
	if err := o.Step(p, g, 0.1); err != nil {
		t.Fatal(err)
	}
	o2, _ := NewAdamW(cfg, 4, segs)
	if err := o2.LoadState(saved); err != nil {
		t.Fatal(err)
	}
	if err := o2.Step(p2, g, 0.1); err != nil {
		t.Fatal(err)
	}
	for i := range p {
		if p[i] != p2[i] {
			t.Fatalf("resumed step differs at %d: %v vs %v", i, p[i], p2[i])
		}
	}
	if o2.Steps() != 2 {
		t.Fatalf("steps %d", o2.Steps())
	}
}

func TestAdamWErrors(t *testing.T) {
	if _, err := NewAdamW(DefaultConfig(), 4, []Segment{{0, 2, true}, {3, 1, false}}); err == nil {
		t.Error("gap in segments accepted")
	}
	if _, err := NewAdamW(DefaultConfig(), 4, []Segment{{0, 2, true}}); err == nil {
		t.Error("short segments accepted")
	}
	if _, err := NewAdamW(Config{Beta1: 1, Beta2: 0.9, Eps: 1}, 4, nil); err == nil {
		t.Error("Beta1 = 1 accepted")
	}
	o, _ := NewAdamW(DefaultConfig(), 4, nil)
	if err := o.Step(make([]float32, 3), make([]float32, 4), 1); err == nil {
		t.Error("wrong length accepted")
	}
	if err := o.Step(make([]float32, 4), make([]float32, 4), float32(math.NaN())); err == nil {
		t.Error("NaN learning rate accepted")
	}
	if err := o.LoadState(State{M: make([]float32, 3), V: make([]float32, 4)}); err == nil {
		t.Error("wrong-size state accepted")
	}
}

// TestAdamWParallelSplit checks that a parameter count large enough to be split across
// goroutines gives exactly the single-chunk result.
func TestAdamWParallelSplit(t *testing.T) {
	const n = 1<<16 + 17
	p1 := make([]float32, n)
	g := make([]float32, n)
	for i := range p1 {
		p1[i] = float32(i%97) / 97
		g[i] = float32(i%13)/13 - 0.5
	}
	p2 := append([]float32(nil), p1...)
	o1, _ := NewAdamW(DefaultConfig(), n, nil)
	if err := o1.Step(p1, g, 1e-2); err != nil {
		t.Fatal(err)
	}
	m, v := make([]float32, n), make([]float32, n)
	cfg := DefaultConfig()
	bc1 := float32(1 - math.Pow(float64(cfg.Beta1), 1))
	bc2 := float32(1 - math.Pow(float64(cfg.Beta2), 1))
	kernels.AdamW(p2, g, m, v, 1e-2, cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay, bc1, bc2)
	for i := range p1 {
		if p1[i] != p2[i] {
			t.Fatalf("split update differs at %d", i)
		}
	}
}
