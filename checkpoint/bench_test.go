package checkpoint

import (
	"path/filepath"
	"testing"

	"github.com/agentrl/agentrl/model"
)

// benchModel is the default model size (model.DefaultConfig at a 2k vocabulary, ~3.4 M
// parameters, ~13.6 MB of float32 weights).
func benchModel(b *testing.B) *model.Model {
	return newModel(b, model.DefaultConfig(2048), 1)
}

// Bytes per op count the safetensors files only (weights, plus moments with state).
func BenchmarkSave(b *testing.B) {
	m := benchModel(b)
	tok := testTokenizer(b)
	for _, withState := range []bool{false, true} {
		var st *State
		bytes := int64(4 * m.NumParams())
		name := "weights"
		if withState {
			st = &State{Optimizer: randomState(m.NumParams(), 2), Extra: []byte(`{"step":1}`)}
			bytes *= 3
			name = "weights+optimizer"
		}
		b.Run(name, func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "ckpt")
			b.SetBytes(bytes)
			for b.Loop() {
				if err := Save(dir, m, tok, st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	m := benchModel(b)
	dir := filepath.Join(b.TempDir(), "ckpt")
	mustSave(b, dir, m, &State{Optimizer: randomState(m.NumParams(), 2)})
	b.Run("LoadModel", func(b *testing.B) {
		b.SetBytes(int64(4 * m.NumParams()))
		for b.Loop() {
			if _, err := LoadModel(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Load", func(b *testing.B) { // weights, tokenizer, optimizer state
		b.SetBytes(int64(3 * 4 * m.NumParams()))
		for b.Loop() {
			if _, err := Load(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("model.New", func(b *testing.B) { // the random initialization Load pays for and discards
		for b.Loop() {
			if _, err := model.New(m.Cfg, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ReadSafetensors", func(b *testing.B) {
		b.SetBytes(int64(4 * m.NumParams()))
		for b.Loop() {
			if _, _, err := ReadSafetensors(filepath.Join(dir, weightsFile)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
