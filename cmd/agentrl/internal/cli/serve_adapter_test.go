package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/tokenizer"
)

// serve --adapter refuses, before listening, an adapter made for a base of another shape.
func TestServeRefusesAnAdapterOfAnotherBase(t *testing.T) {
	tok, err := tokenizer.Train([]string{"What is 12 + 30? Answer: 42"}, tokenizer.TrainOptions{VocabSize: 300})
	if err != nil {
		t.Fatal(err)
	}
	mc := model.Config{Vocab: tok.VocabSize(), Dim: 32, Layers: 1, Heads: 2, KVHeads: 1, Hidden: 64, MaxSeq: 64,
		RopeTheta: 10000, NormEps: model.DefaultNormEps, TieEmbeddings: true}
	base, err := model.New(mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := checkpoint.Save(filepath.Join(dir, "base"), base, tok, nil); err != nil {
		t.Fatal(err)
	}
	mc.Hidden = 96
	other, err := model.New(mc, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.AddLoRA(model.LoRAConfig{Rank: 2, Alpha: 4, Targets: []string{"down_proj"}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.SaveAdapter(filepath.Join(dir, "adapter"), other, "org/other"); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "serve", "--checkpoint", filepath.Join(dir, "base"), "--adapter", filepath.Join(dir, "adapter"), "--addr", "127.0.0.1:0")
	if err == nil || !strings.Contains(err.Error(), "down_proj") {
		t.Fatalf("served an adapter of another base: %v\n%s", err, out)
	}
}
