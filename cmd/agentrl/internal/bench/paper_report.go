package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// paperEq is where a comparison's runs are read alike: at the fewest episodes trained and the
// least RL wall time any of its runs reached, so every arm is read inside its own curve.
type paperEq struct{ eps, wall float64 }

func equalPoint(runs []*paperRun) paperEq {
	eq := paperEq{math.Inf(1), math.Inf(1)}
	for _, r := range runs {
		last := r.points[len(r.points)-1]
		eq.eps, eq.wall = min(eq.eps, last.trained), min(eq.wall, last.wall)
	}
	return eq
}

// paperFigure is one number each run yields, and how the tables print it.
type paperFigure struct {
	title func(eq paperEq) string
	scale float64
	prec  int
	unit  string
	lower bool // lower is better
	of    func(r *paperRun, eq paperEq) float64
}

func fixed(s string) func(paperEq) string { return func(paperEq) string { return s } }

// paperFigures are the figures a comparison may show or claim, by key.
var paperFigures = map[string]paperFigure{
	"start":  {title: fixed("pass@1 start"), scale: 100, prec: 1, unit: "%", of: func(r *paperRun, _ paperEq) float64 { return r.points[0].pass1 }},
	"end":    {title: fixed("pass@1 end"), scale: 100, prec: 1, unit: "%", of: func(r *paperRun, _ paperEq) float64 { return r.last().pass1 }},
	"greedy": {title: fixed("greedy end"), scale: 100, prec: 1, unit: "%", of: func(r *paperRun, _ paperEq) float64 { return r.last().greedy }},
	"at-eps": {title: func(eq paperEq) string { return fmt.Sprintf("pass@1 at %.0f trained eps", eq.eps) }, scale: 100, prec: 1, unit: "%",
		of: func(r *paperRun, eq paperEq) float64 { return pass1At(r.points, eq.eps) }},
	"lift-eps": {title: fixed("lift per 1k trained eps"), scale: 100, prec: 2, unit: " pt",
		of: func(r *paperRun, eq paperEq) float64 {
			return 1000 * (pass1At(r.points, eq.eps) - r.points[0].pass1) / eq.eps
		}},
	"at-wall": {title: func(eq paperEq) string { return fmt.Sprintf("pass@1 at %.1fs RL", eq.wall) }, scale: 100, prec: 1, unit: "%",
		of: func(r *paperRun, eq paperEq) float64 { return pass1AtWall(r.points, eq.wall) }},
	"lift-min": {title: fixed("lift per RL minute"), scale: 100, prec: 2, unit: " pt",
		of: func(r *paperRun, eq paperEq) float64 {
			return 60 * (pass1AtWall(r.points, eq.wall) - r.points[0].pass1) / eq.wall
		}},
	"tokens": {title: fixed("policy tokens/episode end"), scale: 1, prec: 1, lower: true, of: func(r *paperRun, _ paperEq) float64 { return r.last().tokens }},
	"entropy": {title: fixed("entropy, last quarter"), scale: 1, prec: 3,
		of: func(r *paperRun, _ paperEq) float64 { return meanOf(r.trained[len(r.trained)*3/4:], stepEntropy) }},
	"entropy-min": {title: fixed("entropy min"), scale: 1, prec: 3, of: func(r *paperRun, _ paperEq) float64 { return extremeOf(r.trained, stepEntropy, true) }},
	"grad":        {title: fixed("grad norm mean"), scale: 1, prec: 3, lower: true, of: func(r *paperRun, _ paperEq) float64 { return meanOf(r.trained, stepGrad) }},
	"grad-max":    {title: fixed("grad norm max"), scale: 1, prec: 3, lower: true, of: func(r *paperRun, _ paperEq) float64 { return extremeOf(r.trained, stepGrad, false) }},
	"sampled": {title: fixed("episodes sampled/step"), scale: 1, prec: 1, lower: true,
		of: func(r *paperRun, _ paperEq) float64 { return r.sampled / float64(max(r.steps, 1)) }},
	"critical": {title: fixed("critical-path model calls/episode end"), scale: 1, prec: 2, lower: true,
		of: func(r *paperRun, _ paperEq) float64 { return r.last().critical }},
	"ep-wall": {title: fixed("training episode wall, sub-episodes included"), scale: 1, prec: 3, unit: "s", lower: true,
		of: func(r *paperRun, _ paperEq) float64 { return r.episodeWall }},
	"wall":   {title: fixed("RL wall"), scale: 1, prec: 0, unit: "s", lower: true, of: func(r *paperRun, _ paperEq) float64 { return r.wall }},
	"s-step": {title: fixed("s/step"), scale: 1, prec: 2, unit: "s", lower: true, of: func(r *paperRun, _ paperEq) float64 { return r.wall / float64(max(r.steps, 1)) }},
}

func (r *paperRun) last() evalPoint { return r.points[len(r.points)-1] }

func stepEntropy(p stepPoint) float64 { return p.entropy }
func stepGrad(p stepPoint) float64    { return p.gradNorm }

// meanOf is the mean of f over ps (NaN when there are none).
func meanOf(ps []stepPoint, f func(stepPoint) float64) float64 {
	if len(ps) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, p := range ps {
		s += f(p)
	}
	return s / float64(len(ps))
}

// extremeOf is the least (or the greatest) of f over ps (NaN when there are none).
func extremeOf(ps []stepPoint, f func(stepPoint) float64, least bool) float64 {
	if len(ps) == 0 {
		return math.NaN()
	}
	x := f(ps[0])
	for _, p := range ps[1:] {
		if least {
			x = min(x, f(p))
		} else {
			x = max(x, f(p))
		}
	}
	return x
}

// tableFigures are the columns of a comparison's tables: the start and end pass@1, then its own.
func tableFigures(b paperBench) []string {
	return append([]string{"start", "end"}, b.figures...)
}

// paperSummary is one arm's figures over its seeds.
type paperSummary struct {
	arm  string
	n    int
	figs map[string]interval
}

// summarize computes every arm's figures over its seeds.
func summarize(keys, arms []string, runs []*paperRun, eq paperEq) []paperSummary {
	var sums []paperSummary
	for _, arm := range arms {
		s := paperSummary{arm: arm, figs: map[string]interval{}}
		for _, k := range keys {
			var v []float64
			for _, r := range runs {
				if r.arm == arm {
					v = append(v, paperFigures[k].of(r, eq))
				}
			}
			s.n = len(v)
			s.figs[k] = meanCI(v)
		}
		if s.n > 0 {
			sums = append(sums, s)
		}
	}
	return sums
}

// ordering names the arms from best to worst by figure key, and says which neighbours' 95%
// intervals overlap (an ordering between them is not resolved at this many seeds).
func ordering(sums []paperSummary, key string) string {
	f := paperFigures[key]
	s := slices.Clone(sums)
	slices.SortStableFunc(s, func(a, b paperSummary) int {
		c := cmpFloat(b.figs[key].mean, a.figs[key].mean)
		if f.lower {
			c = -c
		}
		return c
	})
	var b strings.Builder
	for i, x := range s {
		if i > 0 {
			prev, cur := s[i-1].figs[key], x.figs[key]
			if math.IsNaN(prev.half) || math.IsNaN(cur.half) || (!f.lower && prev.lo() <= cur.hi()) || (f.lower && prev.hi() >= cur.lo()) {
				b.WriteString(" ≈ ")
			} else {
				b.WriteString(" > ")
			}
		}
		b.WriteString(x.arm)
	}
	return b.String()
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Verdicts of a claim.
const (
	claimReproduced = "reproduced"
	claimReversed   = "reversed"
	claimUnresolved = "not resolved"
	claimUnmeasured = "not measured"
)

// claimResult is a claim checked on the runs: the paired difference between its arms at each
// seed, oriented so that a positive difference is the paper's ordering, and what its 95%
// interval says.
type claimResult struct {
	claim   paperClaim
	diff    interval
	n       int
	verdict string
}

// judge checks c on runs: reproduced when the interval of the paired difference lies above 0,
// reversed when it lies below, not resolved when it holds 0 or there are fewer than two pairs.
func judge(c paperClaim, runs []*paperRun, eq paperEq) claimResult {
	f := paperFigures[c.figure]
	at := map[uint64][2]*paperRun{}
	for _, r := range runs {
		p := at[r.seed]
		switch r.arm {
		case c.better:
			p[0] = r
		case c.worse:
			p[1] = r
		}
		at[r.seed] = p
	}
	var d []float64
	for _, p := range at {
		if p[0] != nil && p[1] != nil {
			x := f.of(p[0], eq) - f.of(p[1], eq)
			if f.lower {
				x = -x
			}
			d = append(d, x)
		}
	}
	res := claimResult{claim: c, diff: meanCI(d), n: len(d)}
	switch {
	case len(d) == 0:
		res.verdict = claimUnmeasured
	case math.IsNaN(res.diff.half) || res.diff.lo() <= 0 && res.diff.hi() >= 0:
		res.verdict = claimUnresolved
	case res.diff.lo() > 0:
		res.verdict = claimReproduced
	default:
		res.verdict = claimReversed
	}
	return res
}

// verdict says in one line whether the papers' ordering reproduced: every measured claim
// reproduced, any reversed, or neither resolved at this many seeds.
func verdict(rs []claimResult) string {
	count := map[string][]string{}
	measured := 0
	for _, r := range rs {
		count[r.verdict] = append(count[r.verdict], r.claim.better+" vs "+r.claim.worse+" ("+r.claim.figure+")")
		if r.verdict != claimUnmeasured {
			measured++
		}
	}
	switch {
	case measured == 0:
		return "NOT MEASURED: no claim's two arms both ran"
	case len(count[claimReversed]) > 0:
		return fmt.Sprintf("NOT REPRODUCED: reversed %s (%d of %d measured claims); reproduced %d, not resolved %d",
			strings.Join(count[claimReversed], ", "), len(count[claimReversed]), measured, len(count[claimReproduced]), len(count[claimUnresolved]))
	case len(count[claimReproduced]) == measured:
		return fmt.Sprintf("REPRODUCED: all %d measured claims hold with their 95%% intervals apart from 0", measured)
	}
	return fmt.Sprintf("NOT RESOLVED at this many seeds: reproduced %d of %d measured claims, none reversed, not resolved %s",
		len(count[claimReproduced]), measured, strings.Join(count[claimUnresolved], ", "))
}

// printPaper prints a comparison: each run, each arm over its seeds, the papers' claims and the
// verdict, the orderings and every run's evaluations.
func printPaper(w io.Writer, b paperBench, arms []string, runs []*paperRun) {
	if len(runs) == 0 {
		return
	}
	eq := equalPoint(runs)
	keys := tableFigures(b)
	var titles []string
	for _, k := range keys {
		titles = append(titles, paperFigures[k].title(eq))
	}
	fmt.Fprintf(w, "\nper seed (held-out sampled pass@1; entropy and grad norm over the steps that trained; wall = RL steps only, evaluation excluded)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "arm\tseed\t%s\n", strings.Join(titles, "\t"))
	for _, arm := range arms {
		for _, r := range runs {
			if r.arm != arm {
				continue
			}
			cells := []string{r.arm, fmt.Sprint(r.seed)}
			for _, k := range keys {
				f := paperFigures[k]
				cells = append(cells, interval{f.of(r, eq), math.NaN()}.format(f.scale, f.prec, f.unit))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
	}
	tw.Flush()

	sums := summarize(keys, arms, runs, eq)
	fmt.Fprintf(w, "\nover seeds: mean ± half-width of the 95%% interval (Student's t)\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "arm\tseeds\t%s\n", strings.Join(titles, "\t"))
	for _, s := range sums {
		cells := []string{s.arm, fmt.Sprint(s.n)}
		for _, k := range keys {
			f := paperFigures[k]
			cells = append(cells, s.figs[k].format(f.scale, f.prec, f.unit))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nthe papers' orderings, each checked on the difference between its two arms paired by seed (the paper's side positive), mean ± 95%% interval:\n")
	var results []claimResult
	var claimed []string
	for _, c := range b.claims {
		r := judge(c, runs, eq)
		results = append(results, r)
		f := paperFigures[c.figure]
		rel := ">"
		if f.lower {
			rel = "<"
		}
		fmt.Fprintf(w, "  %s %s %s on %s (%s): difference %s over %d seeds: %s\n", c.better, rel, c.worse, f.title(eq), c.paper,
			r.diff.format(f.scale, f.prec, f.unit), r.n, r.verdict)
		if !slices.Contains(claimed, c.figure) {
			claimed = append(claimed, c.figure)
		}
	}
	fmt.Fprintf(w, "verdict: %s\n", verdict(results))
	fmt.Fprintf(w, "\norderings over seeds (\">\": the 95%% intervals are apart; \"≈\": they overlap, so this many seeds do not resolve the order):\n")
	for _, k := range claimed {
		fmt.Fprintf(w, "  %s: %s\n", paperFigures[k].title(eq), ordering(sums, k))
	}
	fmt.Fprintf(w, "\nheld-out sampled pass@1 (greedy) at each evaluation, with RL wall seconds and episodes trained:\n")
	for _, r := range runs {
		var cells []string
		for _, p := range r.points {
			cells = append(cells, fmt.Sprintf("s%d %.1f%% (%.1f%%) %.0fs %.0f", p.step, 100*p.pass1, 100*p.greedy, p.wall, p.trained))
		}
		fmt.Fprintf(w, "  %s seed %d: %s\n", r.arm, r.seed, strings.Join(cells, " | "))
	}
}

// pass1AtWall is the held-out sampled pass@1 after t seconds of RL, interpolated linearly.
func pass1AtWall(ps []evalPoint, t float64) float64 {
	return pass1Along(ps, func(p evalPoint) float64 { return p.wall }, t)
}

// interval is a mean over seeds with the half-width of its 95% interval (NaN with one seed).
type interval struct{ mean, half float64 }

func meanCI(v []float64) interval {
	mean, half := ci95(v)
	return interval{mean, half}
}

// format prints the interval scaled by k with prec decimals: "m ± h", or "m" with one seed.
func (c interval) format(k float64, prec int, unit string) string {
	if math.IsNaN(c.mean) {
		return "-" // e.g. the entropy of a run that trained no step
	}
	if math.IsNaN(c.half) {
		return fmt.Sprintf("%.*f%s", prec, k*c.mean, unit)
	}
	return fmt.Sprintf("%.*f%s ± %.*f", prec, k*c.mean, unit, prec, k*c.half)
}

func (c interval) lo() float64 { return c.mean - c.half }
func (c interval) hi() float64 { return c.mean + c.half }
