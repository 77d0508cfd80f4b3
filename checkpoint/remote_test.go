package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func remoteFixture() RemoteWeights {
	return RemoteWeights{Service: "tinker", URL: "https://tinker.example", BaseModel: "Qwen/Qwen3-4B-Instruct-2507", Rank: 8, ModelID: "model_5e6f7a8b",
		Weights: "tinker://model_5e6f7a8b/weights/run-rl-10", Sampler: "tinker://model_5e6f7a8b/sampler_weights/v10", Version: 10, OptimizerSteps: 40}
}

// A checkpoint of remote weights holds the run's state and says where its weights are; every
// reader of weights refuses it by that place, and no weights file is written.
func TestRemoteWeights(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rl-10")
	w := remoteFixture()
	tok := testTokenizer(t)
	if err := SaveRemote(dir, tinyConfig(true), tok, &State{Extra: json.RawMessage(`{"step":10}`)}, w); err != nil {
		t.Fatal(err)
	}
	rc, err := ReadRemote(dir)
	if err != nil || rc == nil || rc.Weights != w || string(rc.State.Extra) != `{"step":10}` || rc.Tokenizer.VocabSize() != tok.VocabSize() {
		t.Fatalf("read back %+v, %v", rc, err)
	}
	note, err := os.ReadFile(filepath.Join(dir, remoteNoteFile))
	if err != nil || !strings.Contains(string(note), w.Weights) || !strings.Contains(string(note), "not in this folder") {
		t.Fatalf("WEIGHTS.md: %q %v", note, err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			t.Fatalf("a checkpoint of remote weights holds %s", e.Name())
		}
	}
	for name, load := range map[string]func(string) error{
		"Load":        func(d string) error { _, err := Load(d); return err },
		"LoadModel":   func(d string) error { _, err := LoadModel(d); return err },
		"LoadWeights": func(d string) error { _, err := LoadWeights(d); return err },
	} {
		err := load(dir)
		var re *RemoteWeightsError
		if !errors.As(err, &re) || !errors.Is(err, ErrRemoteWeights) || !strings.Contains(err.Error(), w.Weights) || !strings.Contains(err.Error(), "holds no weights") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if rc, err := ReadRemote(t.TempDir()); rc != nil || err != nil {
		t.Fatalf("a folder without remote weights: %v %v", rc, err)
	}
	bad := w
	bad.Weights = "tinker://model_5e6f7a8b/sampler_weights/v10"
	if err := SaveRemote(filepath.Join(t.TempDir(), "x"), tinyConfig(true), tok, nil, bad); err == nil || !strings.Contains(err.Error(), "not a tinker:// path of weights") {
		t.Fatalf("sampler path as training state: %v", err)
	}
	if err := SaveRemote(filepath.Join(t.TempDir(), "x"), tinyConfig(true), tok, &State{Optimizer: randomState(4, 1)}, w); err == nil {
		t.Fatal("a local optimizer beside remote weights was saved")
	}
}

// FuzzRemoteWeights: remote_weights.json decodes into checked paths or an error, never a panic.
func FuzzRemoteWeights(f *testing.F) {
	good, _ := json.Marshal(remoteFixture())
	f.Add(good)
	f.Add([]byte(`{"service": "tinker", "url": "x", "base_model": "b", "rank": 1, "model_id": "m", "sampler": "tinker://m/sampler_weights/v0"}`))
	f.Add([]byte(`{"service": "tinker", "rank": -1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := decodeRemoteWeights(data)
		if err != nil {
			return
		}
		if !strings.HasPrefix(w.Sampler, "tinker://") || w.Rank < 1 || (w.Weights != "" && !strings.Contains(w.Weights, "/weights/")) {
			t.Fatalf("accepted %+v", w)
		}
	})
}
