package dashboard

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzQuery sends arbitrary query strings to the routes that read parameters: each answers 200,
// 400 with a message, or 404 for a run it does not have; none panics.
func FuzzQuery(f *testing.F) {
	root := f.TempDir()
	synthRun(f, filepath.Join(root, "a"), 1, 3, 5, 6)
	s, err := New([]string{root}, Options{Refresh: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	h := s.Handler()
	for _, q := range []string{"", "step=abc", "limit=-1", "limit=500&offset=3", "min_reward=1e309", "phase=rl&max=16",
		"keys=reward/,time/*&phase=sft", "runs=a,a&phase=rl", "status=ok&status=ok", "%zz", "key=&step=1", "max=4001", "runs=nope"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for _, route := range []string{"/api/run/a/trajs", "/api/run/a/series", "/api/compare", "/api/run/a/events"} {
			req := httptest.NewRequest("GET", "/", nil)
			req.URL.Path, req.URL.RawQuery = route, q
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			switch rec.Code {
			case http.StatusOK:
			case http.StatusBadRequest, http.StatusNotFound:
				if rec.Body.Len() == 0 {
					t.Fatalf("%s?%s: %d with no message", route, q, rec.Code)
				}
			default:
				t.Fatalf("%s?%s: %d %s", route, q, rec.Code, rec.Body)
			}
		}
	})
}

// FuzzFlatConfig reads arbitrary config.yaml text: a value or an error, never a panic.
func FuzzFlatConfig(f *testing.F) {
	for _, s := range []string{"phases:\n  - name: sft\n  - name: rl\n    rl: {group_size: 8}\n", "a: [1, {b: 2}]\n", "- x\n- y\n",
		"phases: [{name: a}, {name: a}]\n", "x: &a {y: *a}\n", "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := flatConfig(path)
		if err == nil {
			monitorThresholds(cfg)
		}
	})
}
