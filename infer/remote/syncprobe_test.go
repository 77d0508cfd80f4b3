package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// probeLogprobs are the stand-in servers' logprobs of a sequence of n tokens under the weights
// of version v (0 at the first token, which has no context).
func probeLogprobs(v, n int) []float32 {
	out := make([]float32, n)
	for i := 1; i < n; i++ {
		out[i] = -0.5 - 0.01*float32(v) - 0.001*float32(i)
	}
	return out
}

// folderVersion is N of a published folder …/vN.
func folderVersion(t *testing.T, dir string) int {
	v, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), "v"))
	if err != nil {
		t.Errorf("published folder %q is not vN", dir)
	}
	return v
}

// testdataJSON reads a testdata answer as generic JSON, to be answered with other values.
func testdataJSON(t *testing.T, name string) map[string]any {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// vllmPromptLogprobs is vllm_prompt_logprobs.json answering for tokens with logprobs lps.
func vllmPromptLogprobs(t *testing.T, tokens []int32, lps []float32) string {
	m := testdataJSON(t, "vllm_prompt_logprobs.json")
	pl := []any{nil}
	for i := 1; i < len(tokens); i++ {
		pl = append(pl, map[string]any{strconv.Itoa(int(tokens[i])): map[string]any{"logprob": lps[i], "rank": 1, "decoded_token": "x"}})
	}
	ch := m["choices"].([]any)[0].(map[string]any)
	ch["prompt_logprobs"], ch["prompt_token_ids"] = pl, tokens
	b, _ := json.Marshal(m)
	return string(b)
}

// sglangInputLogprobs is sglang_input_logprobs.json answering for tokens from start on.
func sglangInputLogprobs(t *testing.T, tokens []int32, start int, lps []float32) string {
	m := testdataJSON(t, "sglang_input_logprobs.json")
	var entries []any
	for i := start; i < len(tokens); i++ {
		entries = append(entries, []any{lps[i], tokens[i], nil})
	}
	m["meta_info"].(map[string]any)["input_token_logprobs"] = entries
	b, _ := json.Marshal(m)
	return string(b)
}

// fullWeightsServer stands in for an agentrl or SGLang server that loads full weights: it takes
// a publish (agentrl: the weights route; SGLang: update_weights_from_disk of a folder …/vN) and
// scores with that version's weights, unless ignore is set (a server given other weights: it
// answers the load with success and keeps what it had).
type fullWeightsServer struct {
	t       *testing.T
	dialect Dialect

	mu      sync.Mutex
	version int // whose weights it computes with
	named   int // the version it says it serves (agentrl)
	ignore  bool
}

func (f *fullWeightsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/agentrl/v1/weights":
		io.Copy(io.Discard, r.Body)
		v, _ := strconv.Atoi(r.URL.Query().Get("version"))
		f.named = v
		if !f.ignore {
			f.version = v
		}
		fmt.Fprintf(w, `{"version":%d}`, v)
	case "/agentrl/v1/score":
		var req struct {
			Tokens []int32 `json:"tokens"`
			Start  int     `json:"start"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		lps := probeLogprobs(f.version, len(req.Tokens))[req.Start:]
		json.NewEncoder(w).Encode(map[string]any{"logprobs": lps, "version": f.named})
	case "/update_weights_from_disk":
		var req struct {
			Path string `json:"model_path"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		if !f.ignore {
			f.version = folderVersion(f.t, req.Path)
		}
		io.WriteString(w, `{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0}`)
	case "/generate":
		var req struct {
			InputIDs []int32 `json:"input_ids"`
			Start    int     `json:"logprob_start_len"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		io.WriteString(w, sglangInputLogprobs(f.t, req.InputIDs, req.Start, probeLogprobs(f.version, len(req.InputIDs))))
	default:
		http.NotFound(w, r)
	}
}

// testProbe is the probe of version v: what the learner computes after its update.
func testProbe(v int, prec string) *SyncProbe {
	tokens := []int32{3, 9, 27, 17, 51, 1, 40, 22}
	return &SyncProbe{Tokens: tokens, Want: probeLogprobs(v, len(tokens))[1:], Learner: "the learner", Precision: prec,
		Tolerance: func(p string) float64 {
			if p == BFloat16 {
				return 0.005
			}
			return 1e-4
		}}
}

// A server that serves the version published passes the probe, with its difference reported.
// One given other weights (agentrl or SGLang that answer the load and keep theirs, an agentrl
// server naming another version) or a vLLM adapter that never reached the server (loaded
// under the new name with the old weights, or not loaded at all) fails the publish with a
// *SyncProbeError that names the server and gives both numbers, and is left behind.
func TestSyncProbe(t *testing.T) {
	publish := func(r *Router, v int, dir, prec string) ([]SyncResult, error) {
		return r.PublishChecked(context.Background(), int32(v), filepath.Join(dir, "model.safetensors"), dir, testProbe(v, prec))
	}
	mismatch := func(t *testing.T, err error, server string, want ...string) *SyncProbeError {
		t.Helper()
		var pe *SyncProbeError
		if !errors.As(err, &pe) || pe.Server != server {
			t.Fatalf("got %v, want a sync probe error of %s", err, server)
		}
		for _, w := range append(want, "server "+server) {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not say %q", err, w)
			}
		}
		return pe
	}
	for _, d := range []Dialect{Agentrl, SGLang} {
		t.Run(string(d), func(t *testing.T) {
			f := &fullWeightsServer{t: t, dialect: d}
			srv := httptest.NewServer(f)
			defer srv.Close()
			r := newRouter(t, Options{Servers: []Server{{Name: "gpu0", URL: srv.URL, Dialect: d, APIKey: "k"}}})
			res, err := publish(r, 1, adapterlessDir(t, 1), Float32)
			wantPrec := Float32
			if d == SGLang {
				wantPrec = BFloat16 // SGLang's default precision
			}
			if err != nil || len(res) != 1 || res[0].Server != "gpu0" || res[0].MaxDiff != 0 || res[0].Precision != wantPrec {
				t.Fatalf("a server of the version published: %+v, %v", res, err)
			}
			f.mu.Lock()
			f.ignore = true
			f.mu.Unlock()
			res, err = publish(r, 2, adapterlessDir(t, 2), Float32)
			pe := mismatch(t, err, "gpu0", "logprob -0.51", "the learner at -0.52", "the server does not serve the weights of v2", wantPrec+" tolerance")
			if pe.Position != 1 || len(res) != 1 || res[0].MaxDiff < 0.0099 || res[0].MeanDiff < 0.0099 {
				t.Fatalf("mismatch %+v, results %+v", pe, res)
			}
			if st := r.Stats()[0]; !st.Behind || st.Version != 1 || r.Current(2) != 0 {
				t.Fatalf("a server that failed the probe: %+v", st)
			}
			if d == Agentrl {
				// It computes with v3's weights but names v2.
				f.mu.Lock()
				f.version, f.named = 3, 2
				f.mu.Unlock()
				if _, err := r.checkSync(context.Background(), r.servers[0], &r.servers[0].Server, 3, testProbe(3, Float32)); err == nil || !strings.Contains(err.Error(), "serves version 2") {
					t.Fatalf("a server naming another version: %v", err)
				}
			}
		})
	}
	t.Run("vllm", func(t *testing.T) {
		f := &fakeVLLM{t: t, base: "m", loaded: map[string]string{}}
		srv := httptest.NewServer(f)
		defer srv.Close()
		r := newRouter(t, Options{Servers: []Server{{Name: "gpu1", URL: srv.URL, Dialect: VLLM, Model: "m"}}})
		for v := 1; v <= 2; v++ {
			res, err := publish(r, v, adapterDir(t, v), BFloat16)
			if err != nil || len(res) != 1 || res[0].MaxDiff != 0 || res[0].Precision != BFloat16 {
				t.Fatalf("v%d: %+v, %v", v, res, err)
			}
		}
		// The scoring named the version's adapter, before generation switched to it.
		if got := strings.Join(f.log(), ","); got != "load m-v1,generate m-v1,load m-v2,generate m-v2,unload m-v1" {
			t.Fatalf("calls %s", got)
		}
		// The adapter of v3 never reached the server: it answered the load and kept v2's weights.
		f.set(func() { f.stale = true })
		_, err := publish(r, 3, adapterDir(t, 3), Float32)
		mismatch(t, err, "gpu1", "model m-v3", "logprob -0.52", "the learner at -0.53", "bfloat16 tolerance 0.005")
		if srv, v, _ := r.requestServer(r.servers[0]); srv.Model != "m-v2" || v != 2 || !r.Stats()[0].Behind {
			t.Fatalf("after a failed probe requests name %q (v%d), stats %+v", srv.Model, v, r.Stats()[0])
		}
		if _, ok := f.adapters()["m-v3"]; ok {
			t.Fatal("the adapter that failed the probe stays loaded")
		}
		// Not loaded at all: vLLM has no model of that name.
		f.set(func() { f.stale, f.skipLoad = false, true })
		_, err = publish(r, 4, adapterDir(t, 4), Float32)
		pe := mismatch(t, err, "gpu1", "could not score the probe sequence", "m-v4` does not exist", "may never have reached it")
		if pe.Err == nil {
			t.Fatalf("%+v", pe)
		}
	})
	// A probe the router cannot check is refused before anything is published.
	r := newRouter(t, Options{Servers: []Server{{Name: "a", URL: "http://127.0.0.1:1", Dialect: Agentrl}}})
	if _, err := r.PublishChecked(context.Background(), 1, "", "", &SyncProbe{Tokens: []int32{1, 2}, Tolerance: func(string) float64 { return 1 }}); err == nil || !strings.Contains(err.Error(), "has 0 learner logprobs") {
		t.Fatalf("a probe without the learner's logprobs: %v", err)
	}
}

// adapterlessDir is a published folder vN of full weights.
func adapterlessDir(t *testing.T, v int) string {
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("v%d", v))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLowerPrecision(t *testing.T) {
	for _, c := range [][3]string{{Float32, Float32, Float32}, {Float32, BFloat16, BFloat16}, {BFloat16, Float32, BFloat16}, {"float16", BFloat16, BFloat16}, {"float16", Float32, "float16"}} {
		if got := LowerPrecision(c[0], c[1]); got != c[2] {
			t.Errorf("LowerPrecision(%s, %s) = %s, want %s", c[0], c[1], got, c[2])
		}
	}
}
