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
	synthRun(t, filepath.Join(root, "b"), 2, 5, 30, 0)
	synthRun(t, filepath.Join(root, "big"), 3, 0, 10_000, 0)
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
	attr := func(sel, name string) string {
		t.Helper()
		var v string
		var ok bool
		if err := chromedp.Run(ctx, chromedp.AttributeValue(sel, name, &v, &ok, chromedp.ByQuery)); err != nil || !ok {
			t.Fatalf("%s[%s]: %v (found %v)", sel, name, err, ok)
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
		if err := chromedp.Run(ctx, chromedp.Text(sel, &v, chromedp.ByQuery)); err != nil {
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

	// Curves: one point per training line (5 SFT + 30 RL steps), thresholds and warnings drawn.
	open("/run/a", "curves")
	if p := attr(`[data-chart="reward"]`, "data-points"); p != "35" {
		t.Errorf("reward curve has %s points, want 35", p)
	}
	if p := attr(`[data-chart="entropy"]`, "data-points"); p != "35" {
		t.Errorf("entropy curve has %s points, want 35", p)
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
	if p := attr(`[data-chart="entctl"]`, "data-points"); p != "35" {
		t.Errorf("entropy controller curve has %s points, want 35", p)
	}
	if l := attr(`[data-chart="staleness"]`, "data-lags"); l != "2" {
		t.Errorf("staleness histogram has %s lags, want 2", l)
	}
	if n := count(`[data-chart="queue"]`); n != 1 {
		t.Error("no queue-depth chart")
	}
	for _, c := range []string{"stale", "dist"} {
		if p := attr(`[data-chart="`+c+`"]`, "data-points"); p != "35" {
			t.Errorf("chart %s has %s points, want 35", c, p)
		}
	}

	// Comparison: two runs overlaid, the seed listed as a difference.
	open("/compare?runs=a,b", "compare")
	if r := attr(`[data-chart="cmp-reward/mean"]`, "data-runs"); r != "2" {
		t.Errorf("comparison overlays %s runs, want 2", r)
	}
	if d := text("#config-diff"); !contains(d, "seed") {
		t.Errorf("config differences %q do not list the seed", d)
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
	t.Logf("screenshots in %s", shots)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
