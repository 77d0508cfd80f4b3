package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds a Chromium or Chrome binary (scripts/setup installs Debian's chromium).
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "chromium-headless-shell", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifacts is where the browser test leaves its screenshots: $AGENTRL_ARTIFACTS/dashboard when
// set, else a temporary directory.
func artifacts(t *testing.T) string {
	dir := t.TempDir()
	if a := os.Getenv("AGENTRL_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBrowser drives the dashboard in headless Chromium on synthetic runs: a curve has one point
// per logged step, the comparison view overlays two runs with their config differences, and the
// trajectory view renders a tool call and its response, which is not trained on; the monitor's
// actions and the asynchronous panels are drawn. It measures how
// long the page of a 10k-step run takes to load (logged, not asserted).
func TestBrowser(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no chromium: scripts/setup installs Debian's chromium")
	}
	root := t.TempDir()
	synthRun(t, filepath.Join(root, "a"), 1, 5, 30, 40)
	synthRun(t, filepath.Join(root, "b"), 2, 12, 30, 0)
	synthRun(t, filepath.Join(root, "big"), 3, 0, 10_000, 0)
	synthTreeRun(t, filepath.Join(root, "tree"))
	// b wrote last: "/" opens it, though a is first by name.
	for i, run := range []string{"tree", "a", "big", "b"} {
		when := time.Now().Add(time.Duration(i-4) * time.Hour)
		for _, f := range []string{"metrics.jsonl", "config.yaml"} {
			if err := os.Chtimes(filepath.Join(root, run, f), when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := New([]string{root}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	shots := artifacts(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", exe, err)
	}

	view := 0
	// open loads the page afresh at hash and waits until the view has rendered.
	open := func(hash, shot string) {
		t.Helper()
		view++
		var errText string
		if err := chromedp.Run(ctx,
			chromedp.Navigate(fmt.Sprintf("%s/?view=%d#%s", ts.URL, view, hash)),
			chromedp.WaitVisible(`body[data-ready="1"]`, chromedp.ByQuery),
			chromedp.Evaluate(`(document.querySelector("pre.warnings")||{}).textContent||""`, &errText),
		); err != nil {
			t.Fatalf("%s: %v", hash, err)
		}
		if errText != "" {
			t.Fatalf("%s: the page shows an error: %s", hash, errText)
		}
		var png []byte
		if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, shot+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// attr, count and text read the rendered page; a missing element reads as "" (or 0), which
	// the checks then report, rather than waiting for it.
	attr := func(sel, name string) string {
		t.Helper()
		var v string
		if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`((e) => e ? e.getAttribute(%q) || "" : "")(document.querySelector(%q))`, name, sel), &v)); err != nil {
			t.Fatalf("%s[%s]: %v", sel, name, err)
		}
		return v
	}
	count := func(sel string) int {
		t.Helper()
		var n int
		if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)); err != nil {
			t.Fatal(err)
		}
		return n
	}
	text := func(sel string) string {
		t.Helper()
		var v string
		if err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`((e) => e ? e.innerText : "")(document.querySelector(%q))`, sel), &v)); err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return v
	}

	// Page load of a 10k-step run, cold (first load of this browser) and warm.
	for _, pass := range []string{"cold", "warm"} {
		start := time.Now()
		open("/run/big", "big-"+pass)
		wall := time.Since(start)
		ms, _ := strconv.Atoi(attr("body", "data-load-ms"))
		t.Logf("page load of a 10k-step run (%s): %d ms in the page (navigation start to all charts drawn), %v wall", pass, ms, wall.Round(time.Millisecond))
	}

	// drawn redraws every chart and returns the text it drew on its canvas (axis ticks, axis labels,
	// phase names, threshold labels), read by wrapping the canvas's fillText: what the page shows.
	drawn := func() map[string]drawnChart {
		t.Helper()
		var out []drawnChart
		if err := chromedp.Run(ctx, chromedp.Evaluate(recordText, nil), chromedp.Evaluate(readText, &out)); err != nil {
			t.Fatal(err)
		}
		m := map[string]drawnChart{}
		for _, c := range out {
			m[c.ID] = c
		}
		return m
	}
	// legible checks that no text of a chart is cut off by its canvas's edge or drawn over another.
	legible := func(view string, charts map[string]drawnChart) {
		t.Helper()
		for id, c := range charts {
			for i, a := range c.Texts {
				if a.X0 < -1 || a.Y0 < -1 || a.X1 > c.W+1 || a.Y1 > c.H+1 {
					t.Errorf("%s, chart %s: %q is cut off at the canvas's edge (%.0f,%.0f–%.0f,%.0f of %.0fx%.0f)", view, id, a.Text, a.X0, a.Y0, a.X1, a.Y1, c.W, c.H)
				}
				for _, b := range c.Texts[i+1:] {
					if a.X0 < b.X1-1 && b.X0 < a.X1-1 && a.Y0 < b.Y1-1 && b.Y0 < a.Y1-1 {
						t.Errorf("%s, chart %s: %q drawn over %q", view, id, a.Text, b.Text)
					}
				}
			}
		}
	}

	// shot saves one element's screenshot beside the pages'.
	shot := func(sel, name string) {
		t.Helper()
		var png []byte
		if count(sel) == 0 {
			return // the checks say what is missing
		}
		if err := chromedp.Run(ctx, chromedp.Screenshot(sel, &png, chromedp.ByQuery)); err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// "/" opens the run that wrote last.
	open("/", "latest")
	var sel string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelector("#run-select").value`, &sel)); err != nil {
		t.Fatal(err)
	}
	if note := text(".legend-note"); sel != "b" || !strings.HasPrefix(note, "b: ") {
		t.Errorf(`"/" opens %q (%q), want the latest run b`, sel, note)
	}

	// Curves: each phase on its own axis, the latest (rl) by default: one point per RL step, x
	// ticks counting RL steps (1–30, not lines 6–35), the SFT-only loss panel left out.
	open("/run/a", "curves")
	if on := text("#phase-select a.on"); on != "rl" {
		t.Errorf("phase shown %q, want rl", on)
	}
	for _, c := range []string{"reward", "entropy", "entctl", "stale", "latbias", "dist"} {
		if p := attr(`[data-chart="`+c+`"]`, "data-points"); p != "30" {
			t.Errorf("chart %s on the rl axis has %s points, want 30", c, p)
		}
	}
	if n := count(`[data-chart="reward"] canvas`); n != 1 {
		t.Errorf("reward chart has %d canvases", n)
	}
	if n := count(`[data-chart="time"]`); n != 1 {
		t.Error("no time-per-stage chart")
	}
	if n := count(`.warnings div`); n != 3 {
		t.Errorf("%d warnings listed, want 3", n)
	}
	// The monitor's actions: listed, and the controller's setting drawn (its marks are on the
	// canvas); the asynchronous panels: queue depth, the staleness histogram's two lags, the
	// stale episodes and the workers' counters.
	if n := count(`#actions div`); n != 2 {
		t.Errorf("%d monitor actions listed, want 2", n)
	}
	if l := attr(`[data-chart="staleness"]`, "data-lags"); l != "2" {
		t.Errorf("staleness histogram has %s lags, want 2", l)
	}
	if n := count(`[data-chart="queue"]`); n != 1 {
		t.Error("no queue-depth chart")
	}
	rl := drawn()
	legible("rl", rl)
	for _, c := range []string{"reward", "entropy", "kl", "isq"} {
		shot(`[data-chart="`+c+`"]`, "chart-rl-"+c)
	}
	xs := rl["reward"].xTicks()
	if len(xs) < 3 || xs[0] < 0 || xs[len(xs)-1] > 30 || !rl["reward"].has("rl step") {
		t.Errorf("reward x ticks %v (texts %q), want rl steps within 0–30 labelled \"rl step\"", xs, rl["reward"].texts())
	}
	// Small ranges keep their ticks apart: behaviour KL 0.0002–0.0003, IS weights 1–1.0003.
	for _, id := range []string{"kl", "isq"} {
		ys := rl[id].yTicks()
		seen := map[string]bool{}
		for _, y := range ys {
			seen[y] = true
		}
		if len(ys) < 3 || len(seen) != len(ys) {
			t.Errorf("chart %s: y tick labels %q are not apart", id, ys)
		}
	}
	// The entropy threshold's label is whole, inside the plot; so is the latency bias's on the
	// asynchronous panel.
	if b, ok := rl["entropy"].find("monitor.min_entropy 0.02"); !ok || b.X0 < rl["entropy"].Left {
		t.Errorf("entropy threshold label %+v (found %v) not inside the plot from %.0f; texts %q", b, ok, rl["entropy"].Left, rl["entropy"].texts())
	}
	if b, ok := rl["latbias"].find("monitor.max_latency_bias 1.2"); !ok || b.X0 < rl["latbias"].Left {
		t.Errorf("latency bias threshold label %+v (found %v) not inside the plot from %.0f; texts %q", b, ok, rl["latbias"].Left, rl["latbias"].texts())
	}

	// The whole run: one point per training line (5 SFT + 30 RL), phase names inside the plot,
	// clear of the axis labels.
	open("/run/a?phase=all", "curves-all")
	if p := attr(`[data-chart="reward"]`, "data-points"); p != "35" {
		t.Errorf("reward curve over the run has %s points, want 35", p)
	}
	if n := count(`[data-chart="loss"]`); n != 1 {
		t.Error("no loss chart over the whole run")
	}
	all := drawn()
	legible("all", all)
	for _, c := range []string{"reward", "entropy", "time"} {
		shot(`[data-chart="`+c+`"]`, "chart-all-"+c)
	}
	for _, name := range []string{"sft", "rl"} {
		if b, ok := all["reward"].find(name); !ok || b.X0 < all["reward"].Left {
			t.Errorf("phase name %q %+v (found %v) not inside the plot from %.0f", name, b, ok, all["reward"].Left)
		}
	}
	open("/run/a?phase=sft", "curves-sft")
	if p := attr(`[data-chart="loss"]`, "data-points"); p != "5" {
		t.Errorf("loss on the sft axis has %s points, want 5", p)
	}
	legible("sft", drawn())

	// Comparison: two runs whose SFT phases differ (5 and 12 steps) line up by RL step (30 x
	// values, not the 42 lines of the longer run), with the config keys that differ, inside the
	// phases list.
	open("/compare?runs=a,b", "compare")
	if r := attr(`[data-chart="cmp-reward/mean"]`, "data-runs"); r != "2" {
		t.Errorf("comparison overlays %s runs, want 2", r)
	}
	if p := attr(`[data-chart="cmp-reward/mean"]`, "data-points"); p != "30" {
		t.Errorf("comparison by rl step has %s x values, want 30", p)
	}
	legible("compare", drawn())
	var rows [][]string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`[...document.querySelectorAll("#config-diff tr")].map((tr) => [...tr.children].map((c) => c.textContent))`, &rows)); err != nil {
		t.Fatal(err)
	}
	diff := map[string][]string{}
	for _, r := range rows {
		diff[r[0]] = r[1:]
	}
	if h := diff["key"]; len(h) != 2 || h[0] != "a" || h[1] != "b" {
		t.Errorf("config difference header %q", h)
	}
	if v := diff["phases.rl.rl.group_size"]; len(v) != 2 || v[0] != "5" || v[1] != "6" {
		t.Errorf("config difference rows %q: want phases.rl.rl.group_size 5, 6", rows)
	}
	if v := diff["phases.sft.steps"]; len(v) != 2 || v[0] != "5" || v[1] != "12" {
		t.Errorf("config difference rows %q: want phases.sft.steps 5, 12", rows)
	}
	if v, ok := diff["phases"]; ok {
		t.Errorf("config difference shows the whole phases list: %q", v)
	}
	if v := diff["seed"]; len(v) != 2 || v[0] != "1" || v[1] != "2" {
		t.Errorf("config difference rows %q: want seed 1, 2", rows)
	}

	// Trajectories: the list filters, and one trajectory shows its tool call and masked response.
	open("/trajs/a?status=truncated", "trajectories")
	if n := count(`#traj-table tr.row`); n != 8 {
		t.Errorf("%d truncated trajectories listed, want 8", n)
	}
	open("/traj/a/0", "trajectory")
	if c := text(".tool-call"); !contains(c, "calculator") || !contains(c, "2+3") {
		t.Errorf("tool call shows %q", c)
	}
	if n := count(`.msg.tool .tok.untrained`); n != 2 {
		t.Errorf("%d untrained tool-response tokens, want 2", n)
	}
	if n := count(`.msg.tool .tok.trained`); n != 0 {
		t.Errorf("%d tool-response tokens marked trained", n)
	}
	if n := count(`.msg.assistant .tok.trained`); n != 5 {
		t.Errorf("%d trained assistant tokens, want 5", n)
	}
	if n := count(`#traj-tree`) + count(`.sample-head`); n != 0 {
		t.Errorf("an episode of one sample and no sub-episode draws a tree (%d elements)", n)
	}
	if err := chromedp.Run(ctx, chromedp.Click("#heat-toggle", chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "trajectory-heat.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}

	// An episode that folded and delegated is drawn as the tree of its samples: the root with its
	// two samples (the second the folded context), sub-episode e.1 under it with its sample and
	// e.1.1 nested under e.1, and e.2 not trained; the body marks where each sample starts.
	open("/traj/tree/0", "trajectory-tree")
	if got := text(`#traj-tree li.root > .tree-label`); !contains(got, "4 training samples") || !contains(got, "3 sub-episodes") || !contains(got, "critical path 5") || !contains(got, "folds 1") {
		t.Errorf("the root's label reads %q", got)
	}
	if n := count(`#traj-tree li.root > ul > li.tree-sample`); n != 2 {
		t.Errorf("the root lists %d samples of its own, want 2", n)
	}
	if got := text(`#traj-tree li.root > ul > li.tree-sample:nth-child(2)`); !contains(got, "sample 2") || !contains(got, "folded to the policy's summary (folded 9 tokens into 5)") {
		t.Errorf("the root's second sample reads %q", got)
	}
	if n := count(`#traj-tree li.root > ul > li.sub`); n != 2 {
		t.Errorf("%d sub-episodes directly under the root, want 2 (e.1, e.2)", n)
	}
	if got := attr(`#traj-tree li.sub[data-id="e.1"] li.sub`, "data-id"); got != "e.1.1" {
		t.Errorf("under e.1: %q, want e.1.1 nested", got)
	}
	if got := attr(`#traj-tree li.sub[data-id="e.1.1"]`, "data-depth"); got != "2" {
		t.Errorf("e.1.1 at depth %q", got)
	}
	if got := text(`#traj-tree li.sub[data-id="e.1"] > ul > li.tree-sample`); !contains(got, "sample 3") || !contains(got, "sub-episode e.1 (depth 1, delegated by e at its turn 2)") {
		t.Errorf("e.1's sample reads %q", got)
	}
	if got := text(`#traj-tree li.sub[data-id="e.2"] > .tree-label`); !contains(got, "timeout") || !contains(got, "not trained") {
		t.Errorf("e.2 reads %q", got)
	}
	if n := count(`#traj-tree li.sub[data-id="e.2"] li.tree-sample`); n != 0 {
		t.Errorf("the untrained e.2 lists %d samples", n)
	}
	if n := count(`#traj-body .sample-head`); n != 4 {
		t.Errorf("%d sample headings in the body, want 4", n)
	}
	if got := text(`#sample-4`); !contains(got, "sample 4 of 4") || !contains(got, "sub-episode e.1.1") {
		t.Errorf("the fourth sample's heading reads %q", got)
	}
	// Every token is drawn once, the samples' headings between them.
	if n, want := count(`#traj-body .tok`), synthTreeTraj().Len(); n != want {
		t.Errorf("%d tokens drawn, want %d", n, want)
	}
	// In a window too short to show it, a click on sample 4 in the tree brings its heading into view.
	var before, after float64
	headingTop := chromedp.Evaluate(`document.getElementById("sample-4").getBoundingClientRect().top`, &before)
	if err := chromedp.Run(ctx, chromedp.EmulateViewport(1280, 360), chromedp.Evaluate(`window.scrollTo(0, 0)`, nil), headingTop); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Run(ctx, chromedp.Click(`#traj-tree a[data-sample="4"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.getElementById("sample-4").getBoundingClientRect().top`, &after)); err != nil {
		t.Fatal(err)
	}
	if before < 360 || after < 0 || after > 300 {
		t.Errorf("sample 4's heading at %vpx from the window's top before the click and %vpx after, want below 360 and then within [0, 300]", before, after)
	}
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "trajectory-tree-clicked.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// recordText wraps the canvas's fillText to record each text's box (in canvas pixels) on its
// canvas, then redraws every chart; readText returns what was recorded, with each plot's box.
const recordText = `(() => {
  const P = CanvasRenderingContext2D.prototype;
  if (!P.__fillText) {
    P.__fillText = P.fillText;
    P.fillText = function (text, x, y, maxWidth) {
      const m = this.measureText(text), t = this.getTransform(), pts = [];
      for (const a of [x - m.actualBoundingBoxLeft, x + m.actualBoundingBoxRight])
        for (const b of [y - m.actualBoundingBoxAscent, y + m.actualBoundingBoxDescent]) pts.push([t.a * a + t.c * b + t.e, t.b * a + t.d * b + t.f]);
      (this.canvas.__texts = this.canvas.__texts || []).push({ text: String(text),
        x0: Math.min(...pts.map((p) => p[0])), x1: Math.max(...pts.map((p) => p[0])), y0: Math.min(...pts.map((p) => p[1])), y1: Math.max(...pts.map((p) => p[1])) });
      return arguments.length > 3 ? P.__fillText.call(this, text, x, y, maxWidth) : P.__fillText.call(this, text, x, y);
    };
  }
  for (const b of document.querySelectorAll("[data-chart]")) {
    const c = b.querySelector("canvas");
    if (c && b.uplot) { c.__texts = []; b.uplot.redraw(false, true); }
  }
})()`

const readText = `[...document.querySelectorAll("[data-chart]")].filter((b) => b.uplot).map((b) => {
  const c = b.querySelector("canvas"), u = b.uplot;
  return { id: b.dataset.chart, w: c.width, h: c.height, left: u.bbox.left, top: u.bbox.top, width: u.bbox.width, height: u.bbox.height,
    texts: (c.__texts || []).filter((x) => x.text.trim() !== "") };
})`

// drawnChart is what one chart drew: its canvas size, its plot's box and its texts.
type drawnChart struct {
	ID                       string
	W, H                     float64
	Left, Top, Width, Height float64
	Texts                    []drawnText
}

// drawnText is one text drawn on a canvas, with its box in canvas pixels.
type drawnText struct {
	Text           string
	X0, X1, Y0, Y1 float64
}

func (c drawnChart) texts() []string {
	var out []string
	for _, x := range c.Texts {
		out = append(out, x.Text)
	}
	return out
}

func (c drawnChart) find(text string) (drawnText, bool) {
	for _, x := range c.Texts {
		if x.Text == text {
			return x, true
		}
	}
	return drawnText{}, false
}

func (c drawnChart) has(text string) bool { _, ok := c.find(text); return ok }

// yTicks are the texts left of the plot: the y axis's tick labels.
func (c drawnChart) yTicks() []string {
	var out []string
	for _, x := range c.Texts {
		if x.X1 <= c.Left+1 {
			out = append(out, x.Text)
		}
	}
	return out
}

// xTicks are the numbers below the plot: the x axis's tick labels.
func (c drawnChart) xTicks() []float64 {
	var out []float64
	for _, x := range c.Texts {
		if x.Y0 >= c.Top+c.Height-1 {
			if v, err := strconv.ParseFloat(x.Text, 64); err == nil {
				out = append(out, v)
			}
		}
	}
	return out
}
