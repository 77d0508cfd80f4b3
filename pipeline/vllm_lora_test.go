package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/infer"
	"github.com/agentrl/agentrl/infer/local"
	"github.com/agentrl/agentrl/infer/remote"
	"github.com/agentrl/agentrl/learn"
	lremote "github.com/agentrl/agentrl/learn/remote"
	"github.com/agentrl/agentrl/model"
)

// vllmLoRAServer stands in for vLLM serving a base model with runtime LoRA updating (vLLM has
// no CPU build here). It speaks the request and response shapes of infer/remote/testdata: it
// holds its own base (loaded once, as vLLM does), puts each adapter loaded by
// /v1/load_lora_adapter on a copy of that base (the folder's other files are not read), and
// generates with the agentrl engine of the model a completion names, so what it samples is what
// the adapter it was given computes.
type vllmLoRAServer struct {
	t    *testing.T
	base string // checkpoint folder of the base; served as model "m"

	mu      sync.Mutex
	engines map[string]*local.Engine
	models  map[string]*model.Model // what each engine computes with, for prompt_logprobs
	calls   []string
	// stale answers a load with success and serves the adapter loaded before under the new name
	// (an adapter that never reached the server: verl #7495).
	stale    bool
	lastPath string
}

func newVLLMLoRAServer(t *testing.T, base string) (*vllmLoRAServer, string) {
	f := &vllmLoRAServer{t: t, base: base, engines: map[string]*local.Engine{}, models: map[string]*model.Model{}}
	m, err := checkpoint.LoadModel(base)
	if err != nil {
		t.Fatal(err)
	}
	f.models["m"] = m
	if f.engines["m"], err = local.NewEngine(m, 0, local.EngineConfig{Slots: 8}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.Close()
		for _, e := range f.engines {
			e.Close()
		}
	})
	return f, srv.URL
}

func (f *vllmLoRAServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "BadRequestError", "code": status}})
	}
	switch r.URL.Path {
	case "/health":
		return
	case "/version":
		fmt.Fprint(w, `{"version": "0.11.0"}`)
		return
	case "/v1/models": // the base, and each adapter loaded with the base as its parent
		f.mu.Lock()
		defer f.mu.Unlock()
		data := []any{map[string]any{"id": "m", "object": "model", "root": f.base, "parent": nil, "max_model_len": 320}}
		for name := range f.engines {
			if name != "m" {
				data = append(data, map[string]any{"id": name, "object": "model", "parent": "m", "max_model_len": 320})
			}
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		return
	case "/v1/load_lora_adapter", "/v1/unload_lora_adapter":
		var req struct {
			Name string `json:"lora_name"`
			Path string `json:"lora_path"`
		}
		if json.NewDecoder(r.Body).Decode(&req) != nil || req.Name == "" {
			fail(400, "bad body")
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if r.URL.Path == "/v1/unload_lora_adapter" {
			f.calls = append(f.calls, "unload "+req.Name)
			e := f.engines[req.Name]
			if e == nil || req.Name == "m" {
				fail(404, fmt.Sprintf("The lora adapter '%s' cannot be found.", req.Name))
				return
			}
			e.Close()
			delete(f.engines, req.Name)
			delete(f.models, req.Name)
			fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
			return
		}
		f.calls = append(f.calls, "load "+req.Name)
		if f.engines[req.Name] != nil {
			fail(400, fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.Name))
			return
		}
		v, err := strconv.Atoi(req.Name[strings.LastIndex(req.Name, "-v")+2:])
		if err != nil {
			fail(400, "adapter name without a version")
			return
		}
		path := req.Path
		if f.stale && f.lastPath != "" {
			path = f.lastPath
		} else {
			f.lastPath = path
		}
		m, err := checkpoint.LoadModel(f.base)
		if err == nil {
			_, err = checkpoint.LoadAdapter(path, m)
		}
		if err != nil {
			fail(400, err.Error())
			return
		}
		f.models[req.Name] = m
		if f.engines[req.Name], err = local.NewEngine(m, int32(v), local.EngineConfig{Slots: 8}); err != nil {
			fail(500, err.Error())
			return
		}
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
	case "/v1/completions":
		var req struct {
			Model     string  `json:"model"`
			Prompt    []int32 `json:"prompt"`
			MaxTokens int     `json:"max_tokens"`
			Temp      float32 `json:"temperature"`
			TopP      float32 `json:"top_p"`
			TopK      int     `json:"top_k"`
			Seed      uint64  `json:"seed"`
			Stop      []int32 `json:"stop_token_ids"`
			// PromptLogprobs asks for the prompt's logprobs (the weight-sync probe).
			PromptLogprobs *int `json:"prompt_logprobs"`
		}
		if json.NewDecoder(r.Body).Decode(&req) != nil {
			fail(400, "bad body")
			return
		}
		f.mu.Lock()
		e, em := f.engines[req.Model], f.models[req.Model]
		op := "generate "
		if req.PromptLogprobs != nil {
			op = "score "
		}
		f.calls = append(f.calls, op+req.Model)
		f.mu.Unlock()
		if e == nil {
			fail(404, fmt.Sprintf("The model `%s` does not exist.", req.Model))
			return
		}
		if req.PromptLogprobs != nil {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, promptLogprobsAnswer(f.t, em, req.Prompt))
			return
		}
		s := infer.Sampling{Temperature: req.Temp, TopP: req.TopP, TopK: max(req.TopK, 0)}
		if s.TopP == 1 {
			s.TopP = 0
		}
		c, err := e.Generate(r.Context(), infer.Request{Prompt: req.Prompt, MaxTokens: req.MaxTokens, Sampling: s, Seed: req.Seed, Stop: req.Stop})
		if err != nil {
			fail(400, err.Error())
			return
		}
		toks := make([]string, len(c.Tokens))
		for i, id := range c.Tokens {
			toks[i] = fmt.Sprintf("token_id:%d", id)
		}
		finish := "stop"
		if c.Finish == infer.FinishLength {
			finish = "length"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"object": "text_completion", "model": req.Model, "choices": []any{map[string]any{
			"index": 0, "text": "", "token_ids": c.Tokens, "finish_reason": finish,
			"logprobs": map[string]any{"tokens": toks, "token_logprobs": c.Logprobs},
		}}})
	default:
		http.NotFound(w, r)
	}
}

// promptLogprobsAnswer is vLLM's answer to a scoring of prompt (prompt_logprobs: 0) under m,
// in the shape of infer/remote/testdata/vllm_prompt_logprobs.json.
func promptLogprobsAnswer(t *testing.T, m *model.Model, prompt []int32) string {
	b, err := os.ReadFile("../infer/remote/testdata/vllm_prompt_logprobs.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	s := &learn.Seqs{Tokens: prompt, Offsets: []int{0, len(prompt)}, Mask: make([]bool, len(prompt))}
	for i := range s.Mask {
		s.Mask[i] = true
	}
	out := learn.Outputs{Logprobs: make([]float32, len(prompt))}
	if err := (&learn.Builtin{Model: m, RowLen: len(prompt)}).Forward(context.Background(), s, learn.ForwardOptions{}, &out); err != nil {
		t.Error(err)
	}
	pl := []any{nil}
	for i := 1; i < len(prompt); i++ {
		pl = append(pl, map[string]any{strconv.Itoa(int(prompt[i])): map[string]any{"logprob": out.Logprobs[i], "rank": 1, "decoded_token": "x"}})
	}
	ch := doc["choices"].([]any)[0].(map[string]any)
	ch["prompt_logprobs"], ch["prompt_token_ids"] = pl, prompt
	b, _ = json.Marshal(doc)
	return string(b)
}

func (f *vllmLoRAServer) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// vllmGenerator is a rollout.generator of one vLLM server on the trainer's disk.
func vllmGenerator(url string) *remote.Config {
	return &remote.Config{Timeout: time.Minute, Servers: []remote.ServerConfig{{
		Server: remote.Server{Name: "vllm0", URL: url, Dialect: remote.VLLM, Model: "m", ProcessedLogprobs: true}, SharedDisk: true}}}
}

// A run that trains LoRA generates on vLLM: each update's adapter is loaded under its version's
// name, generation switches to it and the previous one is unloaded, and the run records what the
// in-process run records (the server samples with the adapters the run trained, on its own base).
func TestVLLMLoRARun(t *testing.T) {
	train := func(gen *remote.Config) *Run {
		c := tinyConfig(t, t.TempDir(), loraSets...)
		c.Rollout.Generator = gen
		run, err := NewRun(c, Options{Envs: testEnvs()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Train(context.Background()); err != nil {
			t.Fatal(err)
		}
		return run
	}
	ref := train(nil)
	// The server's base is what the RL phase adapts: the SFT phase's end.
	srv, url := newVLLMLoRAServer(t, ref.checkpointDir("sft-p0.s000030"))
	got := train(vllmGenerator(url))
	sameRun(t, ref.Dir, got.Dir)
	// What is published is the adapter alone: the server holds the base.
	entries, err := os.ReadDir(filepath.Join(got.Dir, publishedDir))
	if err != nil || len(entries) != 1 {
		t.Fatalf("published/: %v, %v", entries, err)
	}
	files, _ := os.ReadDir(filepath.Join(got.Dir, publishedDir, entries[0].Name()))
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	if !slices.Equal(names, []string{"adapter_config.json", "adapter_model.safetensors"}) {
		t.Fatalf("published/%s holds %v, want the adapter alone", entries[0].Name(), names)
	}
	// Every version was loaded, generated with once loaded, and unloaded once the next served
	// (the probe at the phase's start generates with the base).
	loaded, generated, scored := "m", 0, 0
	for _, c := range srv.log() {
		op, name, _ := strings.Cut(c, " ")
		switch op {
		case "load":
			if loaded != "m" && name <= loaded && len(name) == len(loaded) {
				t.Fatalf("loaded %s after %s", name, loaded)
			}
			loaded = name
		case "unload":
			if name == loaded {
				t.Fatalf("unloaded %s, the adapter in use", name)
			}
		case "generate":
			if name != loaded {
				t.Fatalf("generated with %s while %s was the latest loaded", name, loaded)
			}
			generated++
		case "score": // the sync probe, of each adapter as it is loaded
			if name != loaded {
				t.Fatalf("scored with %s while %s was the latest loaded", name, loaded)
			}
			scored++
		}
	}
	srv.mu.Lock()
	names = slices.Sorted(maps.Keys(srv.engines))
	srv.mu.Unlock()
	if scored != 5 { // the phase's start and its 4 updates
		t.Fatalf("%d sync probes, want 5", scored)
	}
	if generated == 0 || !slices.Equal(names, []string{"m", loaded}) {
		t.Fatalf("%d completions; the server holds %v at the end, want m and %s", generated, names, loaded)
	}
	t.Logf("last adapter %s, %d completions, %d calls", loaded, generated, len(srv.log()))

	// An adapter that never reached the server (it answers the load and keeps the adapter it
	// had under the new name: verl #7495) stops the run at the first update's sync, before any
	// episode samples it, naming the server, the adapter and both logprobs.
	stale, url2 := newVLLMLoRAServer(t, ref.checkpointDir("sft-p0.s000030"))
	stale.stale = true // from the second load on: the phase's start loads v30 as it should
	// The stand-in computes in float32, as the learner does, and agrees with it exactly; one
	// update moves the probe by less than bfloat16's default tolerance, so the test declares the
	// server's precision and bounds float32's tightly.
	c := tinyConfig(t, t.TempDir(), loraSets...)
	tight := 1e-6
	c.Learner.ProbeTolerance = &learn.ProbeTolerance{Float32: &tight}
	c.Rollout.Generator = vllmGenerator(url2)
	c.Rollout.Generator.Servers[0].Precision = remote.Float32
	run, err := NewRun(c, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = run.Train(context.Background())
	for _, want := range []string{"server vllm0 (vllm, " + url2 + ", model m-v31)", "scores probe token", "the learner (the run's model) at", "float32 tolerance 1e-06", "the server does not serve the weights of v31"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("a stale adapter: %v, want an error saying %q", err, want)
		}
	}
	for _, c := range stale.log() {
		if c == "generate m-v31" {
			t.Fatal("an episode sampled the adapter that failed the probe")
		}
	}
}

// The generator block refuses what cannot receive what the RL phases publish.
func TestVLLMLoRAGeneratorConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		edit func(g *remote.Config)
		want string
	}{
		{"vllm with lora", loraSets, func(g *remote.Config) {}, ""},
		{"vllm without a shared disk", loraSets, func(g *remote.Config) { g.Servers[0].SharedDisk = false }, "set shared_disk: true"},
		{"vllm full weights", onesSets, func(g *remote.Config) {}, "vLLM has no stock route to load them (it loads LoRA adapters"},
		{"agentrl with lora", loraSets, func(g *remote.Config) {
			g.Servers[0] = remote.ServerConfig{Server: remote.Server{Name: "a", URL: "http://127.0.0.1:1", Dialect: remote.Agentrl}, Key: "${K}"}
		}, "an agentrl server receives the base weights alone"},
		{"sglang with lora", loraSets, func(g *remote.Config) {
			g.Servers[0] = remote.ServerConfig{Server: remote.Server{Name: "s", URL: "http://127.0.0.1:1", Dialect: remote.SGLang, ProcessedLogprobs: true}, SharedDisk: true}
		}, "update_weights_from_disk loads the base weights alone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tinyConfig(t, t.TempDir(), tc.sets...)
			c.Rollout.Generator = vllmGenerator("http://127.0.0.1:1")
			tc.edit(c.Rollout.Generator)
			err := c.Validate(testEnvs())
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// goAdapterLearner is goLearner for a phase that trains LoRA: it loads the base and the adapter
// from the run's start folder, trains the adapter alone, and writes for the sampler the adapter
// alone in PEFT's format, as the torch learner started with --adapter does.
type goAdapterLearner struct{ goLearner }

func (g *goAdapterLearner) LoadState(_ context.Context, dir string) error {
	m, err := checkpoint.LoadWeights(dir)
	if err != nil {
		return err
	}
	if !m.HasLoRA() {
		return fmt.Errorf("%s holds no adapter", dir)
	}
	l, err := learn.New(m, g.cfg, 4, 320)
	if err != nil {
		return err
	}
	if err := loadTensors(m, l.Opt, dir, true); err != nil {
		return err
	}
	g.b = &learn.Builtin{Model: m, Opt: l.Opt, RowLen: 320}
	return nil
}

// A phase that trains LoRA through an external learner (backend http) and generates on vLLM:
// the learner's sampler folders hold the adapter alone, the run loads it after every update,
// checks the sync with the probe and publishes it to vLLM through its LoRA routes; the run
// records what the in-process run records, bit for bit. A learner that trains other parameters
// than the phase's adapter is refused at the start.
func TestVLLMLoRARunThroughHTTPLearner(t *testing.T) {
	ref, err := NewRun(tinyConfig(t, t.TempDir(), loraSets...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ref.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv, url := newVLLMLoRAServer(t, ref.checkpointDir("sft-p0.s000030"))

	cfg := tinyConfig(t, t.TempDir(), loraSets...)
	g := &goAdapterLearner{goLearner{cfg: cfg.Phases[1].Optim}}
	var sampled []string
	ls, err := lremote.NewServer(g, "", 0, 0, lremote.Info{Params: int64(len(ref.model.LoRA.Data))})
	if err != nil {
		t.Fatal(err)
	}
	ls.SaveWeights = func(dir string, _ int32) (int64, error) {
		sampled = append(sampled, dir)
		return 0, checkpoint.SaveAdapter(dir, g.b.Model, "")
	}
	hs := httptest.NewServer(ls)
	defer hs.Close()
	cfg.Learner = learn.BackendConfig{Backend: learn.BackendHTTP, URL: hs.URL}
	cfg.Rollout.Generator = vllmGenerator(url)
	run, err := NewRun(cfg, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	g.run = run.Dir
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(sampled) != 4 {
		t.Fatalf("the learner wrote %d sampler folders, want one per RL step (4)", len(sampled))
	}
	want, got := metricLines(t, ref.Dir), metricLines(t, run.Dir)
	if len(got) != len(want) {
		t.Fatalf("%d metric lines, want %d", len(got), len(want))
	}
	synced := 0
	for i := range want {
		// The learner, the run's model and the server compute alike: every probe agrees exactly.
		if _, ok := got[i]["sync/server_probe_max_abs_diff"]; ok {
			synced++
		}
		for k, d := range got[i] {
			if strings.HasPrefix(k, "sync/") {
				if d != 0.0 {
					t.Fatalf("metrics line %d: %s %v", i+1, k, d)
				}
				delete(got[i], k)
			}
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("metrics line %d differs:\nthrough the learner and vLLM %v\nin-process                   %v", i+1, got[i], want[i])
		}
	}
	if n := len(srv.log()); n == 0 || synced != 4 {
		t.Fatalf("%d calls to the vLLM stand-in, %d steps with the servers' probe, want 4", n, synced)
	}

	// A learner of the full weights for a LoRA phase is refused, naming both counts.
	full := &goLearner{cfg: cfg.Phases[1].Optim}
	ls2, err := lremote.NewServer(full, "", 0, 0, lremote.Info{Params: int64(ref.model.NumParams())})
	if err != nil {
		t.Fatal(err)
	}
	hs2 := httptest.NewServer(ls2)
	defer hs2.Close()
	cfg2 := tinyConfig(t, t.TempDir(), loraSets...)
	cfg2.Learner = learn.BackendConfig{Backend: learn.BackendHTTP, URL: hs2.URL}
	run2, err := NewRun(cfg2, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	full.run = run2.Dir
	if _, err := run2.Train(context.Background()); err == nil || !strings.Contains(err.Error(), "the phase's LoRA adapter has") {
		t.Fatalf("a full-weights learner for a LoRA phase: %v", err)
	}
}

// A phase that trains LoRA through the PyTorch learner (started with --adapter): every step
// trains, the first update's loss and gradient norm are the built-in learner's, and every
// sync's probe agrees. Long (Debian's torch on CPU): not in -short.
func TestRunThroughTorchLearnerLoRA(t *testing.T) {
	if testing.Short() {
		t.Skip("a run through the PyTorch learner takes minutes on CPU")
	}
	const python = "/usr/bin/python3"
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skipf("needs %s with torch (Debian's python3-torch): %v", python, err)
	}
	root, err := filepath.Abs("../learners/torch")
	if err != nil {
		t.Fatal(err)
	}
	run, err := NewRun(tinyConfig(t, t.TempDir(), loraSets...), Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := tinyConfig(t, t.TempDir(), loraSets...)
	cfg.Learner = learn.BackendConfig{Backend: learn.BackendTorch, Python: python, Path: root, Device: "cpu"}
	run2, err := NewRun(cfg, Options{Envs: testEnvs()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run2.Train(context.Background()); err != nil {
		t.Fatal(err)
	}
	want, got := phaseLines(t, run.Dir, "rl"), phaseLines(t, run2.Dir, "rl")
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("%d RL steps through torch, %d in-process", len(got), len(want))
	}
	for _, k := range []string{"loss/total", "signal/grad_norm"} {
		a, b := want[0][k].(float64), got[0][k].(float64)
		if math.Abs(a-b) > 1e-6+1e-4*math.Abs(a) {
			t.Errorf("first update's %s: torch %v, built-in %v", k, b, a)
		}
	}
	for i, m := range got {
		if d, ok := m["sync/probe_max_abs_diff"].(float64); !ok || d > 1e-3 {
			t.Errorf("step %d: probe difference %v", i+1, m["sync/probe_max_abs_diff"])
		}
	}
}
