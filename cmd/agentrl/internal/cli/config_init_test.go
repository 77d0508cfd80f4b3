package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// config show with init prints the model the run takes from the checkpoint's config.json, and
// refuses a model setting that contradicts it, naming the key and both values.
func TestConfigShowTakesInitsModel(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	tok, err := tokenizer.Train([]string{"What is 12 + 30? Answer: 42"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.New(model.Config{Vocab: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 64, MaxSeq: 512,
		RopeTheta: 1000000, NormEps: 1e-6, TieEmbeddings: true, Family: model.FamilyQwen3, QKNorm: true, HeadDimension: 24}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Save(dir, m, tok, nil); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "config", "show", "--set", "init="+dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"family: qwen3", "qk_norm: true", "head_dim: 24", "dim: 32", "max_seq: 512", "rope_theta: 1e+06"} {
		if !strings.Contains(out, want) {
			t.Fatalf("config show lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "config", "show", "--set", "init="+dir, "--set", "model.layers=4")
	if err == nil || !strings.Contains(err.Error(), "model.layers: the config says 4 but init "+dir+" has 1") {
		t.Fatalf("a contradicting model.layers: %v\n%s", err, out)
	}
}
