package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

func TestPrecisionRefusals(t *testing.T) {
	for _, c := range []struct {
		o    PrecisionOptions
		want string
	}{
		{PrecisionOptions{Arms: "f32,fp8", Seeds: "1", Steps: 10, Every: 5}, `unknown arm "fp8"`},
		{PrecisionOptions{Arms: "bf16", Seeds: "1", Steps: 10, Every: 5}, "at least two arms"},
		{PrecisionOptions{Arms: "f32,bf16", Seeds: "1", Steps: 10, Every: 3}, "dividing steps"},
		{PrecisionOptions{Arms: "f32,bf16", Seeds: "x", Steps: 10, Every: 5}, `bad seed "x"`},
		{PrecisionOptions{Arms: "f32,bf16", Seeds: "1", Steps: 10, Every: 5, Set: []string{"phases.rl.rl.loss.correction={}"}}, "must correct for it"},
	} {
		c.o.Envs, c.o.RunsDir = all.Builtins(), t.TempDir()
		err := Precision(context.Background(), &bytes.Buffer{}, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: err = %v, want one containing %q", c.o, err, c.want)
		}
	}
}

// The table pairs each arm with the baseline at the same seed: the differences and the speed-up
// are taken seed by seed.
func TestPrintPrecision(t *testing.T) {
	run := func(arm string, seed uint64, end, kl, sampling float64) *asyncArm {
		return &asyncArm{arm: arm, seed: seed, stepsTaken: 10, wall: 20, sampleWall: sampling, points: []evalPoint{{pass1: 0.4}, {step: 10, pass1: end}},
			shift: shiftSummary{steps: 10, klMean: kl, klMax: 2 * kl, essMean: 1, essMin: 1}}
	}
	runs := []*asyncArm{
		run("f32", 1, 0.60, 0, 10), run("bf16", 1, 0.62, 2e-6, 5),
		run("f32", 2, 0.70, 0, 12), run("bf16", 2, 0.68, 4e-6, 6),
	}
	var out bytes.Buffer
	printPrecision(&out, PrecisionOptions{Steps: 10}, []string{"f32", "bf16"}, runs)
	for _, want := range []string{
		"held-out pass@1 sampled after 10 steps", "bf16 − f32", "65.0% ± 63.5", // (60+70)/2 with t(1)=12.706·5/√2
		"behaviour KL per token, mean over steps (×1e-6)", "3.000 ± 12.706", "bf16: 2.00 ± 0.00×", "bf16 seed 2: s0 40.0% (0.0%) | s10 68.0% (0.0%)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
