package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrl/agentrl/infer"
)

// fakeVLLM answers vLLM's runtime LoRA routes and /v1/completions with the shapes of testdata/
// (vLLM itself has no CPU build here): adapters load from a folder that must hold
// adapter_config.json, a name already loaded is refused as vLLM refuses it, an unknown name
// cannot be unloaded, and a completion must name the base model or a loaded adapter.
type fakeVLLM struct {
	t    *testing.T
	base string

	mu       sync.Mutex
	loaded   map[string]string // name → path
	calls    []string          // "load NAME", "unload NAME", "generate MODEL"
	failLoad string            // a load answered 500 with this message
	failOff  string            // an unload answered 500 with this message
	hang     time.Duration     // each LoRA route answers after this long
	noRoutes bool              // VLLM_ALLOW_RUNTIME_LORA_UPDATING unset
	// stale answers a load with success but keeps the previously loaded adapter's weights under
	// the new name (an adapter that never reached the server: verl #7495); skipLoad answers it
	// with success and loads nothing.
	stale, skipLoad bool
	last            string // the path loaded last
}

func (f *fakeVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.t.Error(err)
		}
		return string(b)
	}
	errorJSON := func(status int, file, name string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, strings.ReplaceAll(read(file), "agentrl-calc-v1", name))
	}
	var body struct {
		LoRAName string  `json:"lora_name"`
		LoRAPath string  `json:"lora_path"`
		Model    *string `json:"model"`
		Prompt   []int32 `json:"prompt"`
		// PromptLogprobs asks for the prompt's logprobs (a scoring: the sync probe).
		PromptLogprobs *int `json:"prompt_logprobs"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&body) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if strings.Contains(r.URL.Path, "lora_adapter") {
		if f.noRoutes {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"detail":"Not Found"}`)
			return
		}
		if hang := f.hang; hang > 0 {
			f.mu.Unlock()
			select {
			case <-time.After(hang):
			case <-r.Context().Done():
			}
			f.mu.Lock()
		}
	}
	switch r.URL.Path {
	case "/v1/load_lora_adapter":
		f.calls = append(f.calls, "load "+body.LoRAName)
		switch {
		case body.LoRAName == "" || body.LoRAPath == "":
			http.Error(w, `{"error": {"message": "Both 'lora_name' and 'lora_path' must be provided.", "type": "InvalidUserInput", "code": 400}}`, http.StatusBadRequest)
		case f.failLoad != "":
			http.Error(w, fmt.Sprintf(`{"error": {"message": %q, "type": "InternalServerError", "code": 500}}`, f.failLoad), http.StatusInternalServerError)
		case f.loaded[body.LoRAName] != "":
			errorJSON(http.StatusBadRequest, "vllm_lora_already_loaded.json", body.LoRAName)
		case !HasAdapter(body.LoRAPath):
			http.Error(w, `{"error": {"message": "No adapter found for `+body.LoRAPath+`", "type": "NotFoundError", "code": 404}}`, http.StatusNotFound)
		default:
			switch {
			case f.skipLoad:
			case f.stale && f.last != "":
				f.loaded[body.LoRAName] = f.last
			default:
				f.loaded[body.LoRAName] = body.LoRAPath
				f.last = body.LoRAPath
			}
			io.WriteString(w, strings.ReplaceAll(read("vllm_load_lora_adapter.txt"), "agentrl-calc-v1", body.LoRAName))
		}
	case "/v1/unload_lora_adapter":
		f.calls = append(f.calls, "unload "+body.LoRAName)
		switch {
		case f.failOff != "":
			http.Error(w, fmt.Sprintf(`{"error": {"message": %q, "type": "InternalServerError", "code": 500}}`, f.failOff), http.StatusInternalServerError)
		case f.loaded[body.LoRAName] == "":
			errorJSON(http.StatusNotFound, "vllm_lora_not_found_flat.json", body.LoRAName)
		default:
			delete(f.loaded, body.LoRAName)
			io.WriteString(w, strings.ReplaceAll(read("vllm_unload_lora_adapter.txt"), "agentrl-calc-v1", body.LoRAName))
		}
	case "/v1/completions":
		model := ""
		if body.Model != nil {
			model = *body.Model
		}
		f.calls = append(f.calls, "generate "+model)
		if model != f.base && f.loaded[model] == "" {
			http.Error(w, fmt.Sprintf(`{"error": {"message": "The model `+"`%s`"+` does not exist.", "type": "NotFoundError", "code": 404}}`, model), http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if body.PromptLogprobs != nil {
			// Scored under the weights of the version the adapter's folder holds (the base: v0).
			v := 0
			if model != f.base {
				v = folderVersion(f.t, f.loaded[model])
			}
			io.WriteString(w, vllmPromptLogprobs(f.t, body.Prompt, probeLogprobs(v, len(body.Prompt))))
			return
		}
		io.WriteString(w, read("vllm_completions.json"))
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeVLLM) set(change func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change()
}

func (f *fakeVLLM) adapters() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.loaded)
}

func (f *fakeVLLM) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.calls)
	f.calls = f.calls[:0]
	return out
}

// adapterDir is a published folder holding a (stand-in) PEFT adapter.
func adapterDir(t *testing.T, v int) string {
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("v%d", v))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors", "model.safetensors"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func generateOnce(t *testing.T, r *Router) infer.Completion {
	t.Helper()
	c, err := r.Generate(context.Background(), infer.Request{Prompt: []int32{1, 2}, MaxTokens: 3, Sampling: infer.Sampling{Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A run that trains LoRA publishes each version to vLLM as an adapter of its own name:
// loaded, generation switched to it, the previous one unloaded after the switch.
func TestPublishLoRAToVLLM(t *testing.T) {
	f := &fakeVLLM{t: t, base: "agentrl-calc", loaded: map[string]string{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "v", URL: srv.URL, Dialect: VLLM, Model: "agentrl-calc"}}})
	generateOnce(t, r)
	if got := f.log(); !slices.Equal(got, []string{"generate agentrl-calc"}) {
		t.Fatalf("before any publish: %q", got)
	}
	for v := 1; v <= 3; v++ {
		dir := adapterDir(t, v)
		if err := r.PublishWeights(context.Background(), int32(v), filepath.Join(dir, "model.safetensors"), dir); err != nil {
			t.Fatal(err)
		}
		c := generateOnce(t, r)
		want := []string{fmt.Sprintf("load agentrl-calc-v%d", v)}
		if v > 1 {
			want = append(want, fmt.Sprintf("unload agentrl-calc-v%d", v-1))
		}
		want = append(want, fmt.Sprintf("generate agentrl-calc-v%d", v))
		if got := f.log(); !slices.Equal(got, want) {
			t.Fatalf("v%d: calls %q, want %q", v, got, want)
		}
		if c.Versions[0] != int32(v) || r.Current(int32(v)) != 1 {
			t.Fatalf("v%d: completion of version %d, %d servers current", v, c.Versions[0], r.Current(int32(v)))
		}
		if l := f.adapters(); len(l) != 1 || l[fmt.Sprintf("agentrl-calc-v%d", v)] != dir {
			t.Fatalf("v%d: loaded %v", v, l)
		}
	}
	// A resumed run publishing a version its killed process had loaded replaces it.
	r2 := newRouter(t, Options{Servers: []Server{{Name: "v", URL: srv.URL, Dialect: VLLM, Model: "agentrl-calc"}}})
	dir := adapterDir(t, 3)
	if err := r2.PublishWeights(context.Background(), 3, "", dir); err != nil {
		t.Fatal(err)
	}
	want := []string{"load agentrl-calc-v3", "unload agentrl-calc-v3", "load agentrl-calc-v3"}
	if got := f.log(); !slices.Equal(got, want) || f.adapters()["agentrl-calc-v3"] != dir {
		t.Fatalf("republishing v3: calls %q, loaded %v", got, f.adapters())
	}
}

// Each way a LoRA sync to vLLM fails ends in an error that names the server and the cause,
// within the router's deadline; a failed load leaves generation on the version it had.
func TestPublishLoRAToVLLMFailures(t *testing.T) {
	f := &fakeVLLM{t: t, base: "m", loaded: map[string]string{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	r := newRouter(t, Options{Servers: []Server{{Name: "gpu0", URL: srv.URL, Dialect: VLLM, Model: "m"}}, Timeout: 300 * time.Millisecond})
	publish := func(v int, dir string) error {
		return r.PublishWeights(context.Background(), int32(v), filepath.Join(dir, "model.safetensors"), dir)
	}
	check := func(err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("no error, want %q", want)
		}
		for _, w := range append(want, "gpu0") {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q does not say %q", err, w)
			}
		}
	}
	// A folder of full weights: vLLM cannot load them.
	full := t.TempDir()
	check(publish(1, full), "no stock route that loads full weights")
	if err := publish(1, adapterDir(t, 1)); err != nil {
		t.Fatal(err)
	}
	f.log()
	// The load fails: the server is behind (it gets no requests) and still names v1's adapter.
	f.set(func() { f.failLoad = "CUDA out of memory" })
	check(publish(2, adapterDir(t, 2)), "loading adapter m-v2", "/v1/load_lora_adapter", "HTTP 500", "CUDA out of memory")
	if st := r.Stats()[0]; !st.Behind || st.Version != 1 {
		t.Fatalf("after a failed load: stats %+v", st)
	}
	if srv, v, _ := r.requestServer(r.servers[0]); srv.Model != "m-v1" || v != 1 {
		t.Fatalf("after a failed load requests name %q (v%d)", srv.Model, v)
	}
	f.set(func() { f.failLoad = "" })
	// The unload fails: the server serves v3 (the switch happened) and the error says the old
	// adapter stays loaded.
	f.set(func() { f.failOff = "engine busy" })
	check(publish(3, adapterDir(t, 3)), "serving adapter m-v3", "the adapter it replaced, m-v1, stays loaded", "engine busy")
	if r.Current(3) != 1 || r.Stats()[0].Behind {
		t.Fatalf("after a failed unload: current(3) %d, stats %+v", r.Current(3), r.Stats())
	}
	f.log()
	if c := generateOnce(t, r); c.Versions[0] != 3 || !slices.Equal(f.log(), []string{"generate m-v3"}) {
		t.Fatalf("after a failed unload a completion is of version %d", c.Versions[0])
	}
	f.set(func() { f.failOff = "" })
	// A server that does not answer: the deadline ends the call.
	f.set(func() { f.hang = 5 * time.Second })
	t0 := time.Now()
	check(publish(4, adapterDir(t, 4)), "no answer within 300ms")
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("a hung load took %v", d)
	}
	f.set(func() { f.hang = 0 })
	// A server without the runtime routes.
	f.set(func() { f.noRoutes = true })
	check(publish(5, adapterDir(t, 5)), "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True")
	f.set(func() { f.noRoutes = false })
	// A folder the server cannot read.
	gone := adapterDir(t, 6)
	os.Remove(filepath.Join(gone, "adapter_config.json"))
	check(publish(6, gone), "no stock route")
}

// An SGLang server is not sent a folder with an adapter: update_weights_from_disk would load
// the base alone.
func TestPublishLoRAToSGLangRefused(t *testing.T) {
	r := newRouter(t, Options{Servers: []Server{{Name: "s", URL: "http://127.0.0.1:1", Dialect: SGLang}}})
	dir := adapterDir(t, 1)
	err := r.PublishWeights(context.Background(), 1, filepath.Join(dir, "model.safetensors"), dir)
	if err == nil || !strings.Contains(err.Error(), "not the LoRA adapter") {
		t.Fatalf("publishing an adapter to SGLang: %v", err)
	}
}

func FuzzLoRAAnswer(f *testing.F) {
	for _, name := range []string{"vllm_load_lora_adapter.txt", "vllm_unload_lora_adapter.txt", "vllm_lora_already_loaded.json", "vllm_lora_not_found_flat.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(200, b)
		f.Add(400, b)
	}
	f.Add(404, []byte(`{"detail":"Not Found"}`))
	f.Fuzz(func(t *testing.T, status int, data []byte) {
		err := loraAnswer("/v1/load_lora_adapter", status, data)
		if (err == nil) != (status == 200) {
			t.Fatalf("status %d: %v", status, err)
		}
		var le *loraError
		if err != nil && (!errors.As(err, &le) || le.status != status) {
			t.Fatalf("status %d: %v", status, err)
		}
	})
}
