package dashboard

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	r := c.series([]string{"reward/mean", "sft/loss"}, 1000, "")
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
	if len(ev.Thresholds) != 4 || ev.Thresholds[3].Metric != "async/latency_bias" || ev.Thresholds[0].Metric != "explore/entropy" || ev.Thresholds[0].Value != 0.02 {
		t.Fatalf("thresholds %+v", ev.Thresholds)
	}
	var sr seriesReply
	get(t, h, "/api/run/a/series?keys=explore/tool_mix/,time/train_s", &sr)
	if len(sr.Series) != 2 || sr.Series["explore/tool_mix/calculator"] == nil {
		t.Fatalf("series %v", sr.Series)
	}
	var cmp compareReply
	get(t, h, "/api/compare?runs=a,b&keys=reward/mean", &cmp)
	// The config difference names the keys inside the phases list that differ, not the list.
	if len(cmp.Series) != 2 || len(cmp.Diff) != 2 || cmp.Diff[0].Key != "phases.rl.rl.group_size" || cmp.Diff[0].Values[0] != "5" ||
		cmp.Diff[0].Values[1] != "6" || cmp.Diff[1].Key != "seed" || cmp.Diff[1].Values[1] != "2" {
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

// TestPhaseAxes draws a phase on its own axis, its steps, and lines up runs whose SFT phases
// differ in length by their RL step; the run list says which run wrote last.
func TestPhaseAxes(t *testing.T) {
	root := t.TempDir()
	synthRun(t, filepath.Join(root, "a"), 1, 5, 30, 0)
	synthRun(t, filepath.Join(root, "b"), 2, 12, 20, 0)
	old := time.Now().Add(-time.Hour)
	for _, f := range []string{"metrics.jsonl", "config.yaml"} {
		if err := os.Chtimes(filepath.Join(root, "b", f), old, old); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New([]string{root}, Options{Refresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	var runs []runInfo
	get(t, h, "/api/runs", &runs)
	if len(runs) != 2 || runs[0].Updated <= runs[1].Updated || runs[1].Updated != old.UnixMilli() {
		t.Fatalf("updated %+v", runs)
	}
	var sr seriesReply
	get(t, h, "/api/run/b/series?keys=reward/mean,sft/loss&phase=rl", &sr)
	if sr.Phase != "rl" || sr.Total != 20 || len(sr.X) != 20 || sr.X[0] != 1 || sr.X[19] != 20 || sr.Series["reward/mean"][0] == nil {
		t.Fatalf("rl axis %+v", sr)
	}
	for _, v := range sr.Series["sft/loss"] {
		if v != nil {
			t.Fatal("an SFT value on the RL axis")
		}
	}
	get(t, h, "/api/run/b/series?keys=sft/loss&phase=sft&max=16", &sr)
	if sr.Total != 12 || len(sr.X) != 12 || sr.X[11] != 12 {
		t.Fatalf("sft axis %+v", sr)
	}
	var cmp compareReply
	get(t, h, "/api/compare?runs=a,b&keys=reward/mean&phase=rl", &cmp)
	if cmp.Phase != "rl" || cmp.Series[0].X[0] != 1 || cmp.Series[1].X[0] != 1 || len(cmp.Series[0].X) != 30 || len(cmp.Series[1].X) != 20 {
		t.Fatalf("compare by rl step: %+v", cmp.Series)
	}
	// Step 1 of RL: the same x in both runs, though it is line 6 of one and line 13 of the other.
	if a, b := *cmp.Series[0].Series["reward/mean"][0], *cmp.Series[1].Series["reward/mean"][0]; math.Abs(a-(0.3+0.5/30+0.01)) > 1e-9 || math.Abs(b-(0.3+0.5/20+0.02)) > 1e-9 {
		t.Fatalf("rl step 1: %v %v", a, b)
	}
	var ev eventsReply
	get(t, h, "/api/run/a/events", &ev)
	if ev.Evals[0].Phase != "" || ev.Evals[1].Phase != "rl" || ev.Evals[1].Step != 30 {
		t.Fatalf("evals %+v", ev.Evals)
	}
}

// TestBadQuery refuses what the API cannot read with 400 and a message naming the parameter,
// instead of answering as if it were absent.
func TestBadQuery(t *testing.T) {
	root := t.TempDir()
	synthRun(t, filepath.Join(root, "a"), 1, 5, 30, 40)
	s, err := New([]string{root}, Options{Refresh: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, c := range []struct{ path, want string }{
		{"/api/run/a/trajs?step=abc", `step="abc"`},
		{"/api/run/a/trajs?step=0", `step="0"`},
		{"/api/run/a/trajs?limit=-1", `limit="-1": want an integer from 1 to 500`},
		{"/api/run/a/trajs?limit=501", `limit="501"`},
		{"/api/run/a/trajs?offset=-3", `offset="-3"`},
		{"/api/run/a/trajs?min_reward=high", `min_reward="high"`},
		{"/api/run/a/trajs?max_reward=NaN", `max_reward="NaN"`},
		{"/api/run/a/trajs?status=done", `status="done": want one of ok, truncated, env_error, timeout`},
		{"/api/run/a/trajs?stpe=3", `unknown query parameter "stpe"`},
		{"/api/run/a/trajs?step=3&step=4", `"step" given 2 times`},
		{"/api/run/a/series?keys=reward/mean&max=0", `max="0"`},
		{"/api/run/a/series?keys=reward/mean&max=lots", `max="lots"`},
		{"/api/run/a/series?keys=reward/mean&phase=grpo", `phase="grpo": no such phase logged (phases: sft, rl)`},
		{"/api/compare?runs=a&keys=reward/mean&phase=grpo", `phase="grpo"`},
		{"/api/compare?runs=a&max=-1", `max="-1"`},
		{"/api/run/a/events?since=3", `unknown query parameter "since": this route takes none`},
		{"/api/run/a/traj/0?full=1", `unknown query parameter "full"`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%s: %d %q, want 400 with %q", c.path, rec.Code, rec.Body.String(), c.want)
		}
	}
	var page trajPage
	if code := get(t, h, "/api/run/a/trajs?step=2&limit=2&offset=1&min_reward=-1e9&key=unused", &page); code != 200 || page.Matched != 8 || len(page.Items) != 2 {
		t.Fatalf("good query: %d %+v", code, page)
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
	// Wall-clock stages and the per-episode sums are different families: the generation time
	// summed over episodes (1.5 s) exceeds the step's sampling wall time (0.2 s).
	if v := gauge("agentrl_stage_seconds", "stage", "generate_env"); v != 0.2 {
		t.Fatalf("sampling wall seconds %v", v)
	}
	if v := gauge("agentrl_summed_episode_seconds", "stage", "generate"); v != 1.5 {
		t.Fatalf("generation seconds summed over episodes %v", v)
	}
	if v := gauge("agentrl_summed_episode_seconds", "stage", "env"); v != 0.1 {
		t.Fatalf("environment seconds summed over episodes %v", v)
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "agentrl_stage_seconds{") && (strings.Contains(line, `stage="generate"`) || strings.Contains(line, `stage="env"`)) {
			t.Errorf("a per-episode sum among the wall-clock stages: %s", line)
		}
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
	// A blank key, or one a header would trim, is refused: ?key=%20 would open the page.
	for _, k := range []string{" ", "\t", "  \n", " sekrit", "sekrit ", "sek\x00rit"} {
		if _, err := New([]string{dir}, Options{Key: k}); err == nil || !strings.Contains(err.Error(), "key") {
			t.Errorf("key %q: %v", k, err)
		}
	}
	s, err := New([]string{dir}, Options{Key: "sekrit"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for _, p := range []string{"/api/runs", "/api/runs?key=%20", "/api/runs?key=", "/api/runs?key=sekri"} {
		if code := get(t, h, p, nil); code != http.StatusUnauthorized {
			t.Fatalf("%s: %d", p, code)
		}
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

// TestFlatConfig flattens lists of maps item by item (by name, else by index) and keeps other
// lists whole.
func TestFlatConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(path, []byte("phases:\n  - name: sft\n    steps: 3\n  - name: rl\n    rl: {group_size: 8}\n"+
		"envs:\n  - {weight: 1}\n  - {weight: 2}\ntools: [calculator, search]\nsame:\n  - {name: x}\n  - {name: x}\n"), 0o644)
	cfg, err := flatConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"phases.sft.name": "sft", "phases.sft.steps": "3", "phases.rl.name": "rl", "phases.rl.rl.group_size": "8",
		"envs.0.weight": "1", "envs.1.weight": "2", "tools": "[calculator, search]", "same.0.name": "x", "same.1.name": "x"}
	if len(cfg) != len(want) {
		t.Errorf("got %v", cfg)
	}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, cfg[k], v, cfg)
		}
	}
}

// TestTickText runs the page's tick labeller (app.js's tickText) in node: each label writes its
// tick exactly, so small ranges keep their ticks apart and no tick is rounded to its neighbour's
// label.
func TestTickText(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node: the page's tick labeller is checked in node")
	}
	src, err := assets.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)\nfunction tickText\(.*?\n}\n`).Find(src)
	if fn == nil {
		t.Fatal("no tickText in app.js")
	}
	cases := []struct {
		splits []float64
		want   string
	}{
		{[]float64{0, 0.25, 0.5, 0.75, 1}, `["0","0.25","0.50","0.75","1.00"]`},
		{[]float64{0.0002, 0.00025, 0.0003}, `["2.0e-4","2.5e-4","3.0e-4"]`},
		{[]float64{1, 1.0001, 1.0002}, `["1.0000","1.0001","1.0002"]`},
		{[]float64{0, 5, 10}, `["0","5","10"]`},
		{[]float64{-0.1, -0.05, 0}, `["-0.10","-0.05","0"]`},
		{[]float64{0.1, 0.2, 0.30000000000000004}, `["0.1","0.2","0.3"]`},
	}
	var splits [][]float64
	for _, c := range cases {
		splits = append(splits, c.splits)
	}
	in, _ := json.Marshal(splits)
	script := string(fn) + `
console.log(JSON.stringify(` + string(in) + `.map((s) => JSON.stringify(tickText(s)))));`
	out, err := exec.Command(node, "-e", script).CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("tickText(%v) = %s, want %s", c.splits, got[i], c.want)
		}
	}
}
