package checkpoint

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// editConfig rewrites dir/config.json through edit and puts the original back when the
// (sub)test ends.
func editConfig(t *testing.T, dir string, edit func(map[string]any)) {
	t.Helper()
	editFile(t, filepath.Join(dir, configFile), func(orig []byte) []byte {
		var c map[string]any
		if err := json.Unmarshal(orig, &c); err != nil {
			t.Fatal(err)
		}
		edit(c)
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// editFile replaces a file's content for the rest of the (sub)test.
func editFile(t *testing.T, path string, edit func([]byte) []byte) {
	t.Helper()
	orig, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if orig == nil {
			os.Remove(path)
			return
		}
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Error(err)
		}
	})
	if next := edit(orig); next == nil {
		os.Remove(path)
	} else if err := os.WriteFile(path, next, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editTensors rewrites a safetensors file through edit (tensors in name order).
func editTensors(t *testing.T, path string, edit func([]Tensor) []Tensor) {
	t.Helper()
	editSafetensors(t, path, func(ts []Tensor, _ map[string]string) []Tensor { return edit(ts) })
}

// editSafetensors rewrites a safetensors file through edit, which may also change the metadata.
func editSafetensors(t *testing.T, path string, edit func([]Tensor, map[string]string) []Tensor) {
	t.Helper()
	got, meta, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	list := make([]Tensor, 0, len(got))
	for _, tn := range got {
		list = append(list, tn)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	tmp := filepath.Join(t.TempDir(), "edited.safetensors")
	list = edit(list, meta)
	if err := WriteSafetensors(tmp, list, meta); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	editFile(t, path, func([]byte) []byte { return data })
}

// setValue sets value i of the named tensor to v.
func setValue(name string, i int, v float32) func([]Tensor) []Tensor {
	return func(ts []Tensor) []Tensor {
		for _, tn := range ts {
			if tn.Name == name {
				tn.Data[i] = v
			}
		}
		return ts
	}
}

func without(name string) func([]Tensor) []Tensor {
	return func(ts []Tensor) []Tensor {
		out := ts[:0]
		for _, tn := range ts {
			if tn.Name != name {
				out = append(out, tn)
			}
		}
		return out
	}
}

func TestLoadRejectsBadCheckpoints(t *testing.T) {
	m := newModel(t, tinyConfig(true), 3)
	dir := filepath.Join(t.TempDir(), "ckpt")
	mustSave(t, dir, m, &State{Optimizer: randomState(m.NumParams(), 4), Extra: json.RawMessage(`{"step":1}`)})
	weights := filepath.Join(dir, weightsFile)
	optimizer := filepath.Join(dir, optimizerFile)
	state := filepath.Join(dir, trainerStateFile)
	const q0 = "model.layers.0.self_attn.q_proj.weight"

	cases := []struct {
		name   string
		break_ func(t *testing.T)
		want   []string
	}{
		{"config bad JSON", func(t *testing.T) {
			editFile(t, filepath.Join(dir, configFile), func([]byte) []byte { return []byte(`{"hidden_size": 16,`) })
		}, []string{"config.json"}},
		{"config missing", func(t *testing.T) {
			editFile(t, filepath.Join(dir, configFile), func([]byte) []byte { return nil })
		}, []string{"config.json", "no such file"}},
		{"config missing key", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { delete(c, "hidden_size") })
		}, []string{"hidden_size is missing"}},
		{"config wrong type", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { c["num_hidden_layers"] = "two" })
		}, []string{"num_hidden_layers"}},
		{"config insane", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { c["num_attention_heads"] = 3; c["head_dim"] = nil })
		}, []string{"config.json", "head dimension 5"}}, // transformers' hidden_size // heads
		{"config negative", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { c["vocab_size"] = -5 })
		}, []string{"vocab_size must be a positive"}},
		{"config huge layer count", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { c["num_hidden_layers"] = 2000000000 })
		}, []string{"config.json", "layers 2000000000 exceeds the limit"}},
		{"vocab below tokenizer", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { c["vocab_size"] = 100 })
			editTensors(t, weights, func(ts []Tensor) []Tensor {
				for i := range ts {
					if ts[i].Name == "model.embed_tokens.weight" {
						ts[i].Shape, ts[i].Data = []int{100, 16}, ts[i].Data[:100*16]
					}
				}
				return ts
			})
			editTensors(t, optimizer, func(ts []Tensor) []Tensor {
				for i := range ts {
					if ts[i].Shape[0] == 300 {
						ts[i].Shape, ts[i].Data = []int{100, 16}, ts[i].Data[:100*16]
					}
				}
				return ts
			})
		}, []string{"tokenizer has", "vocab_size is 100"}},
		{"missing tensor", func(t *testing.T) { editTensors(t, weights, without(q0)) }, []string{"missing tensors", q0}},
		{"wrong shape", func(t *testing.T) {
			editTensors(t, weights, func(ts []Tensor) []Tensor {
				for i := range ts {
					if ts[i].Name == q0 {
						ts[i].Shape = []int{8, 32}
					}
				}
				return ts
			})
		}, []string{q0, "shape [8 32]", "[16 16]"}},
		{"unexpected tensor", func(t *testing.T) {
			editTensors(t, weights, func(ts []Tensor) []Tensor {
				return append(ts, Tensor{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", Shape: []int{2}, Data: []float32{1, 2}})
			})
		}, []string{"unexpected tensors", "rotary_emb.inv_freq"}},
		{"lm_head while tied", func(t *testing.T) {
			editTensors(t, weights, func(ts []Tensor) []Tensor {
				return append(ts, Tensor{Name: "lm_head.weight", Shape: []int{300, 16}, Data: make([]float32, 300*16)})
			})
		}, []string{"lm_head.weight", "tie_word_embeddings true"}},
		{"lm_head absent while untied", func(t *testing.T) {
			editConfig(t, dir, func(c map[string]any) { c["tie_word_embeddings"] = false })
		}, []string{"missing tensors", "lm_head.weight", "tie_word_embeddings false"}},
		{"weights truncated", func(t *testing.T) {
			editFile(t, weights, func(b []byte) []byte { return b[:len(b)-100] })
		}, []string{weightsFile, "runs past"}},
		{"weights dtype", func(t *testing.T) {
			editFile(t, weights, func(b []byte) []byte {
				return rawFile(`{"model.norm.weight":{"dtype":"F64","shape":[16],"data_offsets":[0,128]}}`, make([]byte, 128))
			})
		}, []string{"model.norm.weight", "F64"}},
		{"weights NaN", func(t *testing.T) {
			editTensors(t, weights, setValue(q0, 37, float32(math.NaN())))
		}, []string{weightsFile, q0, "index 37", "NaN"}},
		{"weights infinite", func(t *testing.T) {
			editTensors(t, weights, setValue("model.norm.weight", 0, float32(math.Inf(-1))))
		}, []string{weightsFile, "model.norm.weight", "index 0", "-Inf"}},
		{"optimizer moment NaN", func(t *testing.T) {
			editTensors(t, optimizer, setValue("exp_avg_sq."+q0, 5, float32(math.NaN())))
		}, []string{optimizerFile, "exp_avg_sq." + q0, "index 5", "NaN"}},
		{"optimizer half precision", func(t *testing.T) {
			editFile(t, optimizer, func(b []byte) []byte { return asF16(t, b) })
		}, []string{optimizerFile, "dtype F16, want F32"}},
		{"optimizer missing", func(t *testing.T) { editFile(t, optimizer, func([]byte) []byte { return nil }) }, []string{optimizerFile, "is missing"}},
		{"optimizer without step", func(t *testing.T) {
			editSafetensors(t, optimizer, func(ts []Tensor, meta map[string]string) []Tensor {
				delete(meta, "step")
				return ts
			})
		}, []string{optimizerFile, "no step"}},
		{"optimizer missing moment", func(t *testing.T) {
			editTensors(t, optimizer, without("exp_avg_sq."+q0))
		}, []string{optimizerFile, "exp_avg_sq." + q0}},
		{"trainer state version", func(t *testing.T) {
			editFile(t, state, func([]byte) []byte { return []byte(`{"format_version": 9, "optimizer": true, "extra": null}`) })
		}, []string{trainerStateFile, "format_version 9"}},
		{"trainer state bad JSON", func(t *testing.T) {
			editFile(t, state, func([]byte) []byte { return []byte(`{"format_version": 1,`) })
		}, []string{trainerStateFile}},
		{"trainer state unknown key", func(t *testing.T) {
			editFile(t, state, func([]byte) []byte { return []byte(`{"format_version": 1, "optimiser": true}`) })
		}, []string{trainerStateFile, "optimiser"}},
		{"optimizer without trainer state", func(t *testing.T) {
			editFile(t, state, func([]byte) []byte { return nil })
		}, []string{"without " + trainerStateFile}},
		{"tokenizer missing", func(t *testing.T) {
			editFile(t, filepath.Join(dir, "tokenizer.json"), func([]byte) []byte { return nil })
		}, []string{"tokenizer.json"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.break_(t)
			_, err := Load(dir)
			expectErr(t, err, append([]string{dir}, c.want...)...)
		})
	}
	// Every case restored its files: the checkpoint loads again.
	if _, err := Load(dir); err != nil {
		t.Fatalf("checkpoint not restored after the cases: %v", err)
	}
}

// asF16 re-labels every tensor of a safetensors file as F16 (zeros), keeping names, shapes and
// metadata: a file another tool might write in half precision.
func asF16(t *testing.T, b []byte) []byte {
	got, meta, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	metaJSON, _ := json.Marshal(meta)
	h := `{"__metadata__":` + string(metaJSON)
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	var data []byte
	for _, n := range names {
		tn := got[n]
		shape, _ := json.Marshal(tn.Shape)
		begin := len(data)
		data = append(data, make([]byte, 2*len(tn.Data))...)
		h += `,"` + n + `":{"dtype":"F16","shape":` + string(shape) + `,"data_offsets":[` + itoa(begin) + `,` + itoa(len(data)) + `]}`
	}
	return rawFile(h+"}", data)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestFirstNonFinite(t *testing.T) {
	nan16 := halfToFloat(0x7e00) // a half-precision NaN as the reader converts it
	for _, c := range []struct {
		x    []float32
		want int
	}{
		{nil, -1},
		{[]float32{0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32}, -1},
		{[]float32{1, 2, float32(math.NaN())}, 2},
		{[]float32{float32(math.Inf(1)), float32(math.NaN())}, 0},
		{[]float32{1, float32(math.Inf(-1))}, 1},
		{[]float32{3, nan16}, 1},
	} {
		if got := firstNonFinite(c.x); got != c.want {
			t.Errorf("firstNonFinite(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}
