package dashboard

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/internal/promtest"
)

func get(t *testing.T, h http.Handler, path string, v any) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	if v != nil && rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, rec.Body.String())
		}
	}
	return rec.Code
}

func TestCurvesIncremental(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	synthRun(t, dir, 1, 5, 20, 0)
	c := newCurves(filepath.Join(dir, "metrics.jsonl"))
	if err := c.refresh(); err != nil {
		t.Fatal(err)
	}
	r := c.series([]string{"reward/mean", "sft/loss"}, 1000)
	if r.Total != 25 || len(r.X) != 25 {
		t.Fatalf("total %d, x %d, want 25", r.Total, len(r.X))
	}
	if r.Series["reward/mean"][0] != nil || r.Series["sft/loss"][0] == nil || r.Series["reward/mean"][5] == nil {
		t.Fatal("missing values should be null and present ones set")
	}
	// A line being written is not read until it is complete; appended lines are read next time.
	f, err := os.OpenFile(filepath.Join(dir, "metrics.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"phase":"rl","step":21,"reward/mean":0.9`)
	c.refresh()
	if c.n != 25 {
		t.Fatalf("a partial line was read: %d lines", c.n)
	}
	f.WriteString(`,"warnings":["distribution shift: x"],"actions":["distribution shift: y: rl.loss.correction.cap 4 → 3.2"]}` + "\n")
	f.Close()
	c.refresh()
	ws, acts, evs, ph := c.events()
	if c.n != 26 || len(ws) != 3 || len(evs) != 2 || len(ph) != 2 || ph[1].End != 26 {
		t.Fatalf("lines %d warnings %d evals %d phases %+v", c.n, len(ws), len(evs), ph)
	}
	if len(acts) != 2 || acts[1].X != 26 || acts[1].Step != 21 || !strings.HasPrefix(acts[1].Text, "distribution shift: y") {
		t.Fatalf("actions %+v, want the synthetic run's (step 15) and the appended line's", acts)
	}
	if evs[0].X != 0 || evs[1].X != 25 {
		t.Fatalf("eval x %d %d, want 0 and 25", evs[0].X, evs[1].X)
	}
	// A file cut back (a resumed run) is read again.
	synthRun(t, dir, 1, 2, 3, 0)
	c.refresh()
	if c.n != 5 {
		t.Fatalf("after the file was rewritten: %d lines, want 5", c.n)
	}
}

func TestDownsampleKeepsExtremes(t *testing.T) {
	n := 100_000
	col := make([]float64, n)
	for i := range col {
		col[i] = math.Sin(float64(i) / 100)
	}
	col[77_777] = 50 // a spike
	idx := downsample([][]float64{col}, n, 3000)
	if len(idx) > 3000 || len(idx) < 1000 {
		t.Fatalf("%d points", len(idx))
	}
	found := false
	for i, j := range idx {
		if i > 0 && j <= idx[i-1] {
			t.Fatal("indices not increasing")
		}
		found = found || j == 77_777
	}
	if !found {
		t.Fatal("the spike was dropped")
	}
}

func TestServerAPI(t *testing.T) {
	root := t.TempDir()
	synthRun(t, filepath.Join(root, "a"), 1, 5, 30, 40)
	synthRun(t, filepath.Join(root, "b"), 2, 5, 30, 0)
	s, err := New([]string{root}, Options{Refresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	var runs []runInfo
	get(t, h, "/api/runs", &runs)
	if len(runs) != 2 || runs[0].Name != "a" || runs[0].Lines != 35 || runs[0].Warnings != 3 {
		t.Fatalf("runs %+v", runs)
	}
	var ev eventsReply
	get(t, h, "/api/run/a/events", &ev)
	if len(ev.Thresholds) != 3 || ev.Thresholds[0].Metric != "explore/entropy" || ev.Thresholds[0].Value != 0.02 {
		t.Fatalf("thresholds %+v", ev.Thresholds)
	}
	var sr seriesReply
	get(t, h, "/api/run/a/series?keys=explore/tool_mix/,time/train_s", &sr)
	if len(sr.Series) != 2 || sr.Series["explore/tool_mix/calculator"] == nil {
		t.Fatalf("series %v", sr.Series)
	}
	var cmp compareReply
	get(t, h, "/api/compare?runs=a,b&keys=reward/mean", &cmp)
	if len(cmp.Series) != 2 || len(cmp.Diff) != 2 || cmp.Diff[0].Key != "phases" || cmp.Diff[1].Key != "seed" || cmp.Diff[1].Values[1] != "2" {
		t.Fatalf("compare diff %+v", cmp.Diff)
	}
	var page trajPage
	get(t, h, "/api/run/a/trajs?status=ok&offset=5&limit=10", &page)
	if page.Total != 40 || page.Matched != 32 || len(page.Items) != 10 || page.Items[0].I != 6 {
		t.Fatalf("page total %d matched %d items %d first %+v", page.Total, page.Matched, len(page.Items), page.Items)
	}
	get(t, h, "/api/run/a/trajs?step=2&min_reward=0.5", &page)
	if page.Matched != 4 {
		t.Fatalf("step 2 reward>=0.5: %d", page.Matched)
	}
	var v trajView
	get(t, h, "/api/run/a/traj/39", &v)
	if v.Summary.ID != "calc-39" || len(v.Tokens) != 11 || !v.Tokens[4].Trained || v.Tokens[7].Trained || v.Tokens[7].Role != "tool" || v.Turns[0].ToolCalls[0].Name != "calculator" {
		t.Fatalf("view %+v", v)
	}
	if code := get(t, h, "/api/run/a/traj/40", nil); code != http.StatusNotFound {
		t.Fatalf("past the end: %d", code)
	}
	if code := get(t, h, "/api/run/nope/series", nil); code != http.StatusNotFound {
		t.Fatalf("unknown run: %d", code)
	}
	// The page and the vendored chart library are embedded.
	for _, p := range []string{"/", "/app.js", "/vendor/uPlot.iife.min.js"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != 200 || rec.Body.Len() < 500 {
			t.Fatalf("%s: %d, %d bytes", p, rec.Code, rec.Body.Len())
		}
	}
}

// TestTrajIndexGrowsAndSkipsDamage indexes a stream as it grows, and one damaged in the middle.
func TestTrajIndexGrowsAndSkipsDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r")
	synthRun(t, dir, 1, 1, 1, 20)
	path := filepath.Join(dir, "trajectories.atrs")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	x := newTrajIndex(path)
	// The first half, then the rest with a torn record in between as a writer leaves it.
	cut := len(data) / 2
	os.WriteFile(path, data[:cut], 0o644)
	if err := x.refresh(); err != nil {
		t.Fatal(err)
	}
	half := len(x.items)
	if half == 0 || half >= 20 {
		t.Fatalf("half indexed: %d", half)
	}
	os.WriteFile(path, data, 0o644)
	if err := x.refresh(); err != nil {
		t.Fatal(err)
	}
	if len(x.items) != 20 || x.lastErr != "" {
		t.Fatalf("indexed %d, err %q", len(x.items), x.lastErr)
	}
	for i := range 20 {
		tr, err := x.read(i)
		if err != nil || tr.ID != synthTraj(i).ID {
			t.Fatalf("record %d: %v %v", i, tr, err)
		}
	}
	// Damage a record in the middle: the rest are still found.
	bad := append([]byte{}, data...)
	off := x.items[10].Offset
	for i := off + 2; i < off+8; i++ {
		bad[i] ^= 0xff
	}
	os.WriteFile(path, bad, 0o644)
	y := newTrajIndex(path)
	if err := y.refresh(); err != nil {
		t.Fatal(err)
	}
	if len(y.items) != 19 || len(y.damage) != 1 {
		t.Fatalf("damaged: %d items, %d damage", len(y.items), len(y.damage))
	}
	tr, err := y.read(10)
	if err != nil || tr.ID != "calc-11" {
		t.Fatalf("after the damage: %v %v", tr, err)
	}
}

// TestPrometheus parses /metrics with the official text parser.
func TestPrometheus(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	synthRun(t, dir, 1, 5, 30, 0)
	s, err := New([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	gauge := promtest.Parse(t, body).Value
	if v := gauge("agentrl_reward_mean", "run", "run"); math.Abs(v-0.81) > 1e-9 {
		t.Fatalf("reward %v", v)
	}
	if v := gauge("agentrl_stage_seconds", "stage", "train"); v != 0.3 {
		t.Fatalf("train seconds %v", v)
	}
	if v := gauge("agentrl_steps_total", "phase", "rl"); v != 30 {
		t.Fatalf("rl steps %v", v)
	}
	if v := gauge("agentrl_episodes_total", "status", "failed"); v != 15 {
		t.Fatalf("failed episodes %v", v)
	}
	if v := gauge("agentrl_episodes_total", "status", "ok"); v != 30*16-15-30 {
		t.Fatalf("ok episodes %v", v)
	}
	if v := gauge("agentrl_monitor_warnings_total"); v != 3 {
		t.Fatalf("warnings %v", v)
	}
	if v := gauge("agentrl_monitor_actions_total", "invariant", "exploration"); v != 2 { // steps 15 and 30
		t.Fatalf("exploration actions %v", v)
	}
	if v := gauge("agentrl_monitor_entropy_coef"); v != 0.003 {
		t.Fatalf("entropy coefficient %v", v)
	}
	for _, name := range []string{"agentrl_success_rate", "agentrl_entropy", "agentrl_zero_var_share", "agentrl_behaviour_kl", "agentrl_grad_norm", "agentrl_version_lag_mean"} {
		gauge(name)
	}
}

func TestAuthAndAddr(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	synthRun(t, dir, 1, 1, 1, 0)
	s, err := New([]string{dir}, Options{Key: "sekrit"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	if code := get(t, h, "/api/runs", nil); code != http.StatusUnauthorized {
		t.Fatalf("no key: %d", code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/?key=sekrit", nil))
	if rec.Code != 200 || len(rec.Result().Cookies()) != 1 {
		t.Fatalf("?key: %d", rec.Code)
	}
	req := httptest.NewRequest("GET", "/api/runs", nil)
	req.AddCookie(rec.Result().Cookies()[0])
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("cookie: %d", rec.Code)
	}
	for _, c := range []struct {
		addr            string
		public, key, ok bool
	}{
		{"127.0.0.1:8090", false, false, true}, {"localhost:0", false, false, true}, {"[::1]:80", false, false, true},
		{"0.0.0.0:8090", false, true, false}, {"0.0.0.0:8090", true, false, false}, {"0.0.0.0:8090", true, true, true},
		{":8090", false, false, false},
	} {
		if err := CheckAddr(c.addr, c.public, c.key); (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q, %v, %v) = %v", c.addr, c.public, c.key, err)
		}
	}
}
