package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// paperColors are the arms' line colours, in arm order.
var paperColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}

// writePaperSVG draws two panels: held-out sampled pass@1 against episodes trained and against
// seconds of RL, one line per arm through the mean over seeds at each evaluation, with a bar
// for its 95% interval. The arms' runs must share their evaluation steps.
func writePaperSVG(path, title string, arms []string, runs []*paperRun) error {
	const W, H, left, right, top, bottom, gap = 900, 380, 60, 130, 40, 50, 70
	panelW := (W - left - right - gap) / 2
	type pt struct{ x, y, half float64 }
	curves := map[string][2][]pt{}
	maxX := [2]float64{}
	for _, arm := range arms {
		var rs []*paperRun
		for _, r := range runs {
			if r.arm == arm {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		var c [2][]pt
		for k := range rs[0].points {
			var ys, eps, wall []float64
			for _, r := range rs {
				if k < len(r.points) {
					ys, eps, wall = append(ys, r.points[k].pass1), append(eps, r.points[k].trained), append(wall, r.points[k].wall)
				}
			}
			ci := meanCI(ys)
			e, _, _ := meanStd(eps)
			s, _, _ := meanStd(wall)
			c[0], c[1] = append(c[0], pt{e, ci.mean, ci.half}), append(c[1], pt{s, ci.mean, ci.half})
			maxX[0], maxX[1] = max(maxX[0], e), max(maxX[1], s)
		}
		curves[arm] = c
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, html.EscapeString(title))
	for p, xlabel := range []string{"episodes trained", "seconds of RL"} {
		x0 := float64(left + p*(panelW+gap))
		y0, ph := float64(top), float64(H-top-bottom)
		xs := maxX[p]
		if xs <= 0 {
			xs = 1
		}
		X := func(v float64) float64 { return x0 + v/xs*float64(panelW) }
		Y := func(v float64) float64 { return y0 + (1-v)*ph }
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="none" stroke="#999"/>`+"\n", x0, y0, panelW, ph)
		for _, g := range []float64{0, 0.25, 0.5, 0.75, 1} {
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%.0f%%</text>`+"\n",
				x0, x0+float64(panelW), Y(g), Y(g), x0-4, Y(g)+4, 100*g)
		}
		for _, g := range []float64{0, 0.5, 1} {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.0f</text>`+"\n", X(g*xs), y0+ph+16, g*xs)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x0+float64(panelW)/2, y0+ph+36, xlabel)
		for i, arm := range arms {
			c, ok := curves[arm]
			if !ok {
				continue
			}
			col := paperColors[i%len(paperColors)]
			var pts []string
			for _, q := range c[p] {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(q.x), Y(q.y)))
				if !math.IsNaN(q.half) {
					fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.5"/>`+"\n",
						X(q.x), X(q.x), Y(min(q.y+q.half, 1)), Y(max(q.y-q.half, 0)), col)
				}
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
		}
	}
	fmt.Fprintf(&b, `<text x="12" y="%d" transform="rotate(-90 12 %d)" text-anchor="middle">held-out pass@1 (sampled)</text>`+"\n", top+(H-top-bottom)/2, top+(H-top-bottom)/2)
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
