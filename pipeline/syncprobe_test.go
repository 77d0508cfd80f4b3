package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// otherWeightsServer stands in front of an agentrl server and keeps the weights it was started
// with: it answers every weight push as the server would, drops the weights, and has the score
// route name the version pushed last (a server that says it loaded a version and did not).
func otherWeightsServer(t *testing.T, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var pushed atomic.Int32
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path != "/agentrl/v1/score" || resp.StatusCode != http.StatusOK {
			return nil
		}
		var body map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return err
		}
		resp.Body.Close()
		body["version"] = pushed.Load()
		b, _ := json.Marshal(body)
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/agentrl/v1/weights" {
			io.Copy(io.Discard, r.Body)
			v, _ := strconv.Atoi(r.URL.Query().Get("version"))
			old := pushed.Swap(int32(v))
			fmt.Fprintf(w, `{"version":%d,"previous":%d}`, v, old)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A server given other weights than those published (it answers the push and keeps its own)
// stops the run at the sync, before any episode samples it: the error names the server and
// gives its logprob and the learner's.
func TestSyncProbeStopsOnServerWithOtherWeights(t *testing.T) {
	t.Setenv(testKeyVar, "k")
	other, err := NewRun(tinyConfig(t, t.TempDir(), "phases.sft.steps=2", "phases.rl.steps=1"), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := otherWeightsServer(t, startServer(t, other.checkpointDir("sft-p0.s000002"), "k"))
	c := tinyConfig(t, t.TempDir(), updateSets...)
	c.Rollout.Generator = generatorConfig(srv)
	run, err := NewRun(c, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	for _, want := range []string{"weight sync probe after v6: server s0 (agentrl, " + srv, "scores probe token", "the learner (the run's model) at", "beyond the float32 tolerance 0.001", "the server does not serve the weights of v6"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a server with other weights: %v, want an error saying %q", err, want)
		}
	}
	if rl := phaseLines(t, run.Dir, "rl"); len(rl) != 0 {
		t.Fatalf("%d RL steps after a failed sync", len(rl))
	}
}

// An asynchronous phase on a server checks every publish too: a step that trains logs the probe
// of the publish before it (which it waited for), and the server agrees with the learner.
func TestSyncProbeAsync(t *testing.T) {
	t.Setenv(testKeyVar, "k")
	other, err := NewRun(tinyConfig(t, t.TempDir(), "phases.sft.steps=2", "phases.rl.steps=1"), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, other.checkpointDir("sft-p0.s000002"), "k")
	c := tinyConfig(t, t.TempDir(), append(slices.Clone(updateSets), "phases.rl.rl.async.max_staleness=1", "phases.rl.rl.loss.correction.level=token")...)
	c.Rollout.Generator = generatorConfig(srv)
	run, err := NewRun(c, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A step that trains publishes; the next step that trains logs that publish's probe.
	checked := 0
	for i, m := range phaseLines(t, run.Dir, "rl") {
		if d, ok := m["sync/server_probe_max_abs_diff"].(float64); ok {
			if d > 1e-3 {
				t.Fatalf("step %d: the servers' probe differs by %v", i+1, d)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no step logs the servers' probe")
	}
}
