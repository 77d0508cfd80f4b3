package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// summaryRuns are three arms at three seeds, each from 40% to its end at 1,000 trained episodes;
// a's steps trained with entropy 0.5 (0.3 in the last quarter) and grad norms 1 and 3.
func summaryRuns() []*paperRun {
	run := func(arm string, seed uint64, end, wall float64) *paperRun {
		return &paperRun{arm: arm, seed: seed, wall: wall, steps: 10, sampled: 2000, points: []evalPoint{
			{pass1: 0.4}, {step: 10, wall: wall, trained: 1000, pass1: end, tokens: 10 * end}},
			trained: []stepPoint{{1, 0.5, 1}, {2, 0.5, 3}, {3, 0.5, 1}, {4, 0.3, 1}}}
	}
	return []*paperRun{
		run("a", 1, 0.8, 100), run("a", 2, 0.82, 100), run("a", 3, 0.78, 100),
		run("b", 1, 0.5, 50), run("b", 2, 0.52, 50), run("b", 3, 0.48, 50),
		run("c", 1, 0.55, 100), run("c", 2, 0.45, 100), run("c", 3, 0.6, 100),
	}
}

// Arms are compared inside their curves, at the fewest episodes and the least RL time any run
// reached; the ordering says which neighbours' intervals overlap.
func TestPaperSummary(t *testing.T) {
	runs := summaryRuns()
	eq := equalPoint(runs)
	if eq.eps != 1000 || eq.wall != 50 {
		t.Fatalf("equal episodes %v, wall %v", eq.eps, eq.wall)
	}
	keys := []string{"at-wall", "lift-eps", "lift-min", "entropy", "entropy-min", "grad", "grad-max", "sampled", "tokens"}
	a := summarize(keys, []string{"a", "b", "c"}, runs, eq)[0]
	// a at 50 s is halfway along its line from 0.4 to 0.8: 0.6; its lift per 1k episodes 40
	// points, per minute 24. Entropy over the last quarter of 4 steps is the last step's.
	for k, want := range map[string]float64{"at-wall": 0.6, "lift-eps": 0.4, "lift-min": 0.24, "entropy": 0.3, "entropy-min": 0.3,
		"grad": 1.5, "grad-max": 3, "sampled": 200, "tokens": 8} {
		if got := a.figs[k].mean; math.Abs(got-want) > 1e-9 {
			t.Errorf("arm a %s = %v, want %v", k, got, want)
		}
	}
	if got := ordering(summarize([]string{"at-eps"}, []string{"a", "b", "c"}, runs, eq), "at-eps"); got != "a > c ≈ b" {
		t.Fatalf("ordering per episode %q", got)
	}
	// Lower is better for tokens: b's 5.0 ± 0.2 lies below a's 8.0 ± 0.2 and c's wide interval.
	if got := ordering(summarize([]string{"tokens"}, []string{"a", "b", "c"}, runs, eq), "tokens"); got != "b ≈ c > a" {
		t.Fatalf("ordering by tokens %q", got)
	}
}

// A claim is judged on the paired differences: a beats b by 0.3 at each seed (reproduced), c
// beats b by 0.05, −0.07, 0.12 (not resolved), b does not beat a (reversed); a claim on fewer
// tokens counts lower as better; an arm that did not run leaves its claim unmeasured.
func TestPaperClaims(t *testing.T) {
	runs := summaryRuns()
	eq := equalPoint(runs)
	for _, tc := range []struct {
		c       paperClaim
		verdict string
		mean    float64
	}{
		{paperClaim{"a", "b", "end", ""}, claimReproduced, 0.3},
		{paperClaim{"c", "b", "end", ""}, claimUnresolved, (0.05 - 0.07 + 0.12) / 3},
		{paperClaim{"b", "a", "end", ""}, claimReversed, -0.3},
		{paperClaim{"b", "a", "tokens", ""}, claimReproduced, 3},
		{paperClaim{"a", "z", "end", ""}, claimUnmeasured, math.NaN()},
	} {
		r := judge(tc.c, runs, eq)
		if r.verdict != tc.verdict || !(math.Abs(r.diff.mean-tc.mean) < 1e-9 || math.IsNaN(tc.mean) && r.n == 0) {
			t.Errorf("%+v: %s, difference %+v; want %s, %v", tc.c, r.verdict, r.diff, tc.verdict, tc.mean)
		}
	}
	rs := func(vs ...string) []claimResult {
		var out []claimResult
		for _, v := range vs {
			out = append(out, claimResult{claim: paperClaim{"a", "b", "end", ""}, verdict: v})
		}
		return out
	}
	for _, tc := range []struct {
		rs   []claimResult
		want string
	}{
		{rs(claimReproduced, claimReproduced, claimUnmeasured), "REPRODUCED: all 2 measured"},
		{rs(claimReproduced, claimReversed), "NOT REPRODUCED: reversed a vs b (end) (1 of 2"},
		{rs(claimReproduced, claimUnresolved), "NOT RESOLVED at this many seeds: reproduced 1 of 2"},
		{rs(claimUnmeasured), "NOT MEASURED"},
	} {
		if got := verdict(tc.rs); !strings.HasPrefix(got, tc.want) {
			t.Errorf("verdict %q, want it to start %q", got, tc.want)
		}
	}
}

// The tables, claims and verdict of a comparison, printed.
func TestPrintPaper(t *testing.T) {
	b := paperBench{claims: []paperClaim{{"a", "b", "end", "Paper A"}, {"c", "b", "at-eps", "Paper C"}},
		figures: []string{"at-eps", "lift-min", "grad-max"}}
	var out bytes.Buffer
	printPaper(&out, b, []string{"a", "b", "c"}, summaryRuns())
	for _, want := range []string{
		"arm  seed  pass@1 start  pass@1 end  pass@1 at 1000 trained eps  lift per RL minute  grad norm max",
		"a    2     40.0%         82.0%",
		"a    3      40.0% ± 0.0", "80.0% ± 5.0",
		"a > b on pass@1 end (Paper A): difference 30.0% ± 0.0 over 3 seeds: reproduced",
		"c > b on pass@1 at 1000 trained eps (Paper C): difference 3.3% ± 23.9 over 3 seeds: not resolved",
		"verdict: NOT RESOLVED at this many seeds: reproduced 1 of 2 measured claims",
		"pass@1 end: a > c ≈ b",
		"a seed 2: s0 40.0%",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestPaperRefusals(t *testing.T) {
	for _, c := range []struct {
		o    PaperOptions
		want string
	}{
		{PaperOptions{Name: "ppo", Seeds: "1", Every: 5}, `unknown comparison "ppo"`},
		{PaperOptions{Name: "ppo-gae", Arms: "ppo", Seeds: "1", Every: 5}, `unknown arm "ppo"`},
		{PaperOptions{Name: "estimators", Seeds: "1", Steps: 10, Every: 3}, "--every 3 must divide the 10 RL steps on calc"},
		{PaperOptions{Name: "gigpo", Seeds: "1", Every: 7}, "--every 7 must divide the 120 RL steps on maze"},
		{PaperOptions{Name: "gigpo", Seeds: "x", Every: 5}, `bad seed "x"`},
		{PaperOptions{Name: "dapo", Seeds: "1", Every: 10, Init: "/tmp/x"}, "give PRESET=DIR for each"},
		{PaperOptions{Name: "dapo", Seeds: "1", Every: 10, Init: "maze=/tmp/x"}, "PRESET one of calc, search"},
		{PaperOptions{Name: "dapo", Seeds: "1", Every: 10, Presets: "maze"}, `it compares on calc, search, not "maze"`},
		{PaperOptions{Name: "dapo", Seeds: "1", Every: 10, Presets: "calc", Init: "search=/tmp/x"}, "PRESET one of calc"},
		{PaperOptions{Name: "gspo", Seeds: "1", Every: 10, Set: []string{"phases.rl.rl.loss.ppo.clip_high=0.3"}}, "arm gspo on search"},
		// The fold arm starts from a supervised checkpoint of its own.
		{PaperOptions{Name: "folding", Seeds: "1", Every: 10, Init: "/tmp/x"}, "checkpoints of ledger-fold, ledger: give PRESET=DIR"},
		{PaperOptions{Name: "delegation", Seeds: "1", Every: 10, Init: "parts-single=/tmp/x"}, "PRESET one of parts-delegate, parts"},
		{PaperOptions{Name: "estimators", Seeds: "1", Steps: 10, Every: 5, Set: []string{"phases.rl.rl.group_size=0"}}, "arm ppo-gae on calc"},
		{PaperOptions{Name: "gspo", Seeds: "1", Every: 10, Teacher: "/tmp/x"}, "gspo has no teacher"},
		{PaperOptions{Name: "distill", Seeds: "1", Every: 10, Teacher: "/tmp/x", TeacherSteps: 40}, "give one or the other"},
		{PaperOptions{Name: "distill", Seeds: "1", Every: 10, TeacherSteps: -1}, "teacher-steps"},
		{PaperOptions{Name: "distill-stages", Seeds: "1", Every: 10, TeacherInit: "/tmp/x"}, "--teacher* do not apply"},
	} {
		c.o.Envs, c.o.RunsDir = all.Builtins(), t.TempDir()
		err := Paper(context.Background(), &bytes.Buffer{}, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want one containing %q", c.o, err, c.want)
		}
	}
}

// Every comparison the command knows has its arms' switches reachable: each arm's configuration
// loads, and arms differ from the comparison's first arm in nothing but their own settings.
func TestPaperArmsLoad(t *testing.T) {
	for _, name := range PaperNames() {
		b := paperBenches[name]
		for _, c := range b.claims {
			if _, ok := paperFigures[c.figure]; !ok {
				t.Errorf("%s: claim on unknown figure %q", name, c.figure)
			}
		}
		for _, f := range b.figures {
			if _, ok := paperFigures[f]; !ok {
				t.Errorf("%s: unknown figure %q", name, f)
			}
		}
		pl, err := planPaper(PaperOptions{Envs: all.Builtins(), Name: name, RunsDir: t.TempDir(), Seeds: "1", Every: 10})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !slices.Equal(pl.presets, b.presets) {
			t.Errorf("%s: compares on %v, want every preset %v", name, pl.presets, b.presets)
		}
		if name == "dapo" {
			one, err := planPaper(PaperOptions{Envs: all.Builtins(), Name: name, RunsDir: t.TempDir(), Seeds: "1", Every: 10, Presets: "search"})
			if err != nil || !slices.Equal(one.presets, []string{"search"}) {
				t.Errorf("dapo --presets search: %v, %v", one, err)
			}
		}
		for _, a := range pl.arms {
			if slices.ContainsFunc(b.arms, func(x paperArm) bool { return x.name == a.name && x.preset != a.preset }) {
				t.Errorf("%s: arm %s changed", name, a.name)
			}
		}
	}
}

// tinyPaper shrinks a comparison to seconds: a small model and few demonstrations, 2 RL steps of
// 2 groups of 4, evaluated at each step on 4 held-out tasks; the same for every arm and preset.
// A policy this small solves nothing, so a format reward for an "e" in the last turn gives the
// groups' rewards the variance that makes every arm train (dynamic sampling would keep none).
func tinyPaper(t *testing.T, name string) PaperOptions {
	return PaperOptions{
		Envs: all.Builtins(), Name: name, RunsDir: t.TempDir(), SFTSteps: 10, Seeds: "1,2", Steps: 2, Every: 1, Tasks: 4, Samples: 1, Quiet: true,
		Set: []string{"model.dim=32", "model.layers=1", "model.heads=2", "model.kv_heads=1", "model.hidden=64",
			"phases.sft.sft.demos=32", "phases.sft.sft.batch_size=8", "phases.rl.rl.groups_per_step=2", "phases.rl.rl.group_size=4",
			"phases.rl.rl.minibatches=2", "rollout.engine_slots=16", `phases.rl.envs.0.reward={format: {pattern: "e", weight: 1}}`},
	}
}

// Every comparison (with -short, search-r1 alone), shrunk to seconds, from real runs: per-seed
// rows of every arm at both seeds, the summary, each claim judged, the verdict, and an SVG with
// every arm's curve in every panel.
func TestPaperSmoke(t *testing.T) {
	names := PaperNames()
	if testing.Short() {
		names = []string{"search-r1"}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			o := tinyPaper(t, name)
			var out bytes.Buffer
			if err := Paper(context.Background(), &out, o); err != nil {
				t.Fatal(err)
			}
			b := paperBenches[name]
			text := out.String()
			for _, p := range b.presets {
				for _, a := range b.arms {
					for _, seed := range []string{"1", "2"} {
						if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(a.name) + `\s+` + seed + `\s+\d+\.\d%`).MatchString(text) {
							t.Errorf("no row for %s seed %s:\n%s", a.name, seed, text)
						}
						if !strings.Contains(text, "done: "+p+" arm "+a.name+" seed "+seed) {
							t.Errorf("no run of %s on %s seed %s", a.name, p, seed)
						}
					}
				}
				svg := filepath.Join(o.RunsDir, "bench-paper-"+name+".svg")
				if len(b.presets) > 1 {
					svg = strings.TrimSuffix(svg, ".svg") + "-" + p + ".svg"
				}
				data, err := os.ReadFile(svg)
				if err != nil {
					t.Fatal(err)
				}
				// Every panel is drawn, with every arm's curve.
				if n, want := strings.Count(string(data), `stroke="#999"`), len(paperPanels(b, armNames(b.arms), nil)); n != want {
					t.Errorf("%s: %d panels, want %d", svg, n, want)
				}
				if n, want := strings.Count(string(data), "<polyline"), len(b.arms)*len(paperPanels(b, armNames(b.arms), nil)); n != want {
					t.Errorf("%s: %d curves, want %d", svg, n, want)
				}
			}
			if n := strings.Count(text, "verdict: "); n != len(b.presets) {
				t.Errorf("%d verdicts for %d presets:\n%s", n, len(b.presets), text)
			}
			for _, c := range b.claims {
				if !strings.Contains(text, c.better+" ") || !strings.Contains(text, "("+c.paper+"): difference ") {
					t.Errorf("claim %+v not judged:\n%s", c, text)
				}
			}
			// A scaffold arm trained its own supervised checkpoint, with its settings.
			for _, p := range b.presets {
				for _, a := range b.arms {
					if !a.scaffold {
						continue
					}
					data, err := os.ReadFile(filepath.Join(o.RunsDir, "bench-paper-sft-"+p+"-"+a.name, "config.yaml"))
					if err != nil {
						t.Fatalf("arm %s: %v", a.name, err)
					}
					if k := strings.SplitN(strings.TrimPrefix(a.sets[0], "rollout."), "=", 2)[0]; !strings.Contains(string(data), k+":") {
						t.Errorf("arm %s: its supervised run's configuration has no %s block", a.name, k)
					}
				}
			}
			// The runs are real: every arm's run directory has its metrics.
			dirs, _ := filepath.Glob(filepath.Join(o.RunsDir, "bench-paper-"+name+"-*", "metrics.jsonl"))
			if want := len(b.presets) * len(b.arms) * 2; len(dirs) != want {
				t.Errorf("%d arm runs with metrics, want %d", len(dirs), want)
			}
			t.Log(text)
		})
	}
}
