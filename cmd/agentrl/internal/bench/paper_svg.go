package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"slices"
	"strings"
)

// paperColors are the arms' line colours, in arm order.
var paperColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// svgPanel is one plot: per arm, a curve through the mean over seeds at each x, with the
// half-width of its 95% interval.
type svgPanel struct {
	xlabel, ylabel string
	share          bool // y is a share in [0, 1], drawn in percent; otherwise scaled to the data
	curves         map[string][]svgPoint
}

type svgPoint struct{ x, y, half float64 }

// paperPanels are a comparison's plots: held-out sampled pass@1 against episodes trained and
// against seconds of RL, and per RL step the figures its tables show: token entropy, gradient
// norm, and the policy's tokens per held-out episode.
func paperPanels(b paperBench, arms []string, runs []*paperRun) []svgPanel {
	pass1 := func(p evalPoint) float64 { return p.pass1 }
	panels := []svgPanel{
		evalPanel(svgPanel{xlabel: "episodes trained", ylabel: "held-out pass@1 (sampled)", share: true}, arms, runs,
			func(p evalPoint) float64 { return p.trained }, pass1),
		evalPanel(svgPanel{xlabel: "seconds of RL", ylabel: "held-out pass@1 (sampled)", share: true}, arms, runs,
			func(p evalPoint) float64 { return p.wall }, pass1),
	}
	shows := func(prefix string) bool {
		return slices.ContainsFunc(b.figures, func(k string) bool { return strings.HasPrefix(k, prefix) })
	}
	if shows("entropy") {
		panels = append(panels, stepPanel("token entropy of the policy's tokens", arms, runs, stepEntropy))
	}
	if shows("grad") {
		panels = append(panels, stepPanel("gradient norm (before clipping)", arms, runs, stepGrad))
	}
	if shows("tokens") {
		panels = append(panels, evalPanel(svgPanel{xlabel: "RL step", ylabel: "policy tokens per held-out episode"}, arms, runs,
			func(p evalPoint) float64 { return float64(p.step) }, func(p evalPoint) float64 { return p.tokens }))
	}
	return panels
}

// evalPanel fills p with a curve per arm through its runs' evaluations: at each, the mean of
// x and the mean and 95% interval of y over the runs (which share their evaluation steps).
func evalPanel(p svgPanel, arms []string, runs []*paperRun, x, y func(evalPoint) float64) svgPanel {
	p.curves = map[string][]svgPoint{}
	for _, arm := range arms {
		rs := armRuns(runs, arm)
		if len(rs) == 0 {
			continue
		}
		for k := range rs[0].points {
			var xs, ys []float64
			for _, r := range rs {
				if k < len(r.points) {
					xs, ys = append(xs, x(r.points[k])), append(ys, y(r.points[k]))
				}
			}
			mx, _, _ := meanStd(xs)
			ci := meanCI(ys)
			p.curves[arm] = append(p.curves[arm], svgPoint{mx, ci.mean, ci.half})
		}
	}
	return p
}

func armRuns(runs []*paperRun, arm string) []*paperRun {
	var rs []*paperRun
	for _, r := range runs {
		if r.arm == arm {
			rs = append(rs, r)
		}
	}
	return rs
}

// stepPanel plots f of each trained RL step, the mean over the seeds whose run trained at it.
func stepPanel(ylabel string, arms []string, runs []*paperRun, f func(stepPoint) float64) svgPanel {
	p := svgPanel{xlabel: "RL step", ylabel: ylabel, curves: map[string][]svgPoint{}}
	for _, arm := range arms {
		by := map[int][]float64{}
		for _, r := range armRuns(runs, arm) {
			for _, s := range r.trained {
				by[s.step] = append(by[s.step], f(s))
			}
		}
		steps := make([]int, 0, len(by))
		for s := range by {
			steps = append(steps, s)
		}
		slices.Sort(steps)
		for _, s := range steps {
			ci := meanCI(by[s])
			p.curves[arm] = append(p.curves[arm], svgPoint{float64(s), ci.mean, ci.half})
		}
	}
	return p
}

// writePaperSVG draws the panels two to a row, one line per arm with a bar for each point's 95%
// interval, and a legend.
func writePaperSVG(path, title string, arms []string, panels []svgPanel) error {
	const panelW, panelH, left, right, top, gapX, gapY = 360, 260, 70, 140, 40, 80, 80
	cols := min(2, len(panels))
	rows := (len(panels) + 1) / 2
	W := left + cols*panelW + (cols-1)*gapX + right
	H := top + rows*(panelH+gapY)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	for i, p := range panels {
		x0 := float64(left + (i%2)*(panelW+gapX))
		y0 := float64(top + (i/2)*(panelH+gapY))
		drawPanel(&b, p, arms, x0, y0, panelW, panelH)
	}
	for i, arm := range arms {
		y := top + 10 + 20*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			W-right+10, W-right+30, y, y, paperColors[i%len(paperColors)], W-right+36, y+4, html.EscapeString(arm))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">mean over seeds;</text><text x="%d" y="%d" font-size="10">bars: 95%% interval</text>`+"\n",
		W-right+10, top+20*len(arms)+10, W-right+10, top+20*len(arms)+24)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// drawPanel draws p in the box at (x0, y0) of size w × h. A share spans 0–100%; other values
// span their means with a margin (never below 0 when no mean is), and interval bars are cut at
// the edges, so that two seeds' wide intervals do not flatten the curves.
func drawPanel(b *strings.Builder, p svgPanel, arms []string, x0, y0 float64, w, h int) {
	xMax, yLo, yHi := 0.0, math.Inf(1), math.Inf(-1)
	for _, c := range p.curves {
		for _, q := range c {
			if !math.IsNaN(q.y) {
				xMax, yLo, yHi = max(xMax, q.x), min(yLo, q.y), max(yHi, q.y)
			}
		}
	}
	switch {
	case p.share || math.IsInf(yLo, 0):
		yLo, yHi = 0, 1
	default:
		pad := max(0.1*(yHi-yLo), 0.05*max(math.Abs(yLo), math.Abs(yHi)), 1e-6)
		if yLo >= 0 {
			yLo = max(yLo-pad, 0)
		} else {
			yLo -= pad
		}
		yHi += pad
	}
	if xMax <= 0 {
		xMax = 1
	}
	X := func(v float64) float64 { return x0 + v/xMax*float64(w) }
	Y := func(v float64) float64 { return y0 + (1-(v-yLo)/(yHi-yLo))*float64(h) }
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, w, h)
	for _, g := range []float64{0, 0.25, 0.5, 0.75, 1} {
		v := yLo + g*(yHi-yLo)
		label := fmt.Sprintf("%.*f", decimals((yHi-yLo)/4), v)
		if p.share {
			label = fmt.Sprintf("%.0f%%", 100*v)
		}
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, x0+float64(w), Y(v), Y(v), x0-4, Y(v)+4, label)
	}
	for _, g := range []float64{0, 0.5, 1} {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.*f</text>`+"\n", X(g*xMax), y0+float64(h)+16, decimals(xMax/2), g*xMax)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x0+float64(w)/2, y0+float64(h)+34, html.EscapeString(p.xlabel))
	cy := y0 + float64(h)/2
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" transform="rotate(-90 %.1f %.1f)" text-anchor="middle">%s</text>`+"\n", x0-48, cy, x0-48, cy, html.EscapeString(p.ylabel))
	for i, arm := range arms {
		c, ok := p.curves[arm]
		if !ok {
			continue
		}
		col := paperColors[i%len(paperColors)]
		var pts []string
		for _, q := range c {
			if math.IsNaN(q.y) {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(q.x), Y(q.y)))
			if !math.IsNaN(q.half) {
				fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.5"/>`+"\n",
					X(q.x), X(q.x), Y(min(q.y+q.half, yHi)), Y(max(q.y-q.half, yLo)), col)
			}
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
	}
}

// decimals is how many decimals tell apart ticks step apart (0 for steps of 1 or more, at most 6).
func decimals(step float64) int {
	if !(step > 0) {
		return 0
	}
	return min(max(int(math.Ceil(-math.Log10(step))), 0), 6)
}
