package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

// The 95% interval of three seeds uses Student's t with 2 degrees of freedom: 0.4, 0.5, 0.6 have
// mean 0.5, sd 0.1, half-width 4.303·0.1/√3.
func TestMeanCI(t *testing.T) {
	c := meanCI([]float64{0.4, 0.5, 0.6})
	if math.Abs(c.mean-0.5) > 1e-12 || math.Abs(c.half-4.303*0.1/math.Sqrt(3)) > 1e-12 {
		t.Fatalf("interval %+v", c)
	}
	if one := meanCI([]float64{0.7}); one.mean != 0.7 || !math.IsNaN(one.half) || one.format(100, 1, "%") != "70.0%" {
		t.Fatalf("one seed: %+v %q", one, one.format(100, 1, "%"))
	}
	if got := c.format(100, 1, "%"); got != "50.0% ± 24.8" {
		t.Fatalf("format %q", got)
	}
	if tQuantile975(1) != 12.706 || tQuantile975(100) != 1.96 {
		t.Fatal("t quantiles")
	}
}

// Arms are compared inside their curves, at the fewest episodes and the least RL time any run
// reached; the ordering says which neighbours' intervals overlap.
func TestPaperSummary(t *testing.T) {
	run := func(arm string, seed uint64, end, wall float64) *paperRun {
		return &paperRun{arm: arm, seed: seed, wall: wall, steps: 10, points: []evalPoint{
			{pass1: 0.4}, {step: 10, wall: wall, trained: 1000, pass1: end}}}
	}
	runs := []*paperRun{
		run("a", 1, 0.8, 100), run("a", 2, 0.82, 100), run("a", 3, 0.78, 100),
		run("b", 1, 0.5, 50), run("b", 2, 0.52, 50), run("b", 3, 0.48, 50),
		run("c", 1, 0.55, 100), run("c", 2, 0.45, 100), run("c", 3, 0.6, 100),
	}
	sums, eqEps, eqWall := summarize([]string{"a", "b", "c"}, runs)
	if eqEps != 1000 || eqWall != 50 {
		t.Fatalf("equal episodes %v, wall %v", eqEps, eqWall)
	}
	a := sums[0]
	// a at 50 s is halfway along its line from 0.4 to 0.8: 0.6; its lift per 1k episodes 40 points.
	if math.Abs(a.atWall.mean-0.6) > 1e-9 || math.Abs(a.perKEps.mean-0.4) > 1e-9 || math.Abs(a.perMin.mean-0.24) > 1e-9 {
		t.Fatalf("arm a: %+v", a)
	}
	if got := ordering(sums, func(s paperSummary) interval { return s.atEps }); got != "a > c ≈ b" {
		t.Fatalf("ordering per episode %q", got)
	}
	var out bytes.Buffer
	printPaper(&out, []string{"a", "b", "c"}, runs)
	for _, want := range []string{"pass@1 at 1000 trained eps", "lift per RL minute", "80.0% ± 5.0", "ordering per trained episode (pass@1 at 1000 episodes): a > c ≈ b", "a seed 2: s0 40.0%"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPaperRefusals(t *testing.T) {
	for _, c := range []struct {
		o    PaperOptions
		want string
	}{
		{PaperOptions{Arms: "ppo", Seeds: "1", Steps: 10, Every: 5}, `unknown arm "ppo"`},
		{PaperOptions{Arms: "grpo", Seeds: "1", Steps: 10, Every: 3}, "dividing steps"},
		{PaperOptions{Arms: "grpo", Seeds: "x", Steps: 10, Every: 5}, `bad seed "x"`},
		{PaperOptions{Arms: "grpo", Seeds: "1", Steps: 10, Every: 5, Set: []string{"phases.rl.rl.group_size=0"}}, "arm grpo"},
	} {
		c.o.Envs, c.o.RunsDir = all.Builtins(), t.TempDir()
		err := PaperPPOGAE(context.Background(), &bytes.Buffer{}, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("err = %v, want one containing %q", err, c.want)
		}
	}
}

// The whole bench, shrunk to seconds: a supervised checkpoint, every arm at two seeds, the tables.
func TestPaperPPOGAESmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a supervised checkpoint and eight RL runs")
	}
	var out bytes.Buffer
	err := PaperPPOGAE(context.Background(), &out, PaperOptions{
		Envs: all.Builtins(), RunsDir: t.TempDir(), SFTSteps: 20, Arms: PPOGAEArms, Seeds: "1,2", Steps: 2, Every: 1,
		Tasks: 4, Samples: 1, Quiet: true, Set: []string{"phases.rl.rl.groups_per_step=2", "phases.rl.optim.warmup=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ppo-gae", "grpo", "rloo", "reinforce++", "ordering per trained episode", "± "} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}
