package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/model"
)

// shardedCheckpoint saves a Qwen3-shaped model in BF16 shards of about 3 KB through SaveWith,
// and returns the folder and the model.
func shardedCheckpoint(t *testing.T) (string, *model.Model) {
	t.Helper()
	cfg := tinyConfig(true)
	cfg.Vocab = 300
	cfg.Family, cfg.QKNorm, cfg.HeadDimension = model.FamilyQwen3, true, 6
	m := newModel(t, cfg, 5)
	dir := filepath.Join(t.TempDir(), "qwen3")
	if err := SaveWith(dir, m, testTokenizer(t), nil, SaveOptions{DType: "BF16", MaxShardBytes: 3000}); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func TestShardedRoundTrip(t *testing.T) {
	dir, m := shardedCheckpoint(t)
	if _, err := os.Stat(filepath.Join(dir, weightsFile)); err == nil {
		t.Fatal("a sharded save also wrote model.safetensors")
	}
	idx, err := os.ReadFile(filepath.Join(dir, indexFile))
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := parseIndex(idx)
	if err != nil {
		t.Fatal(err)
	}
	n := len(parsed.files)
	if n < 3 || parsed.files[0] != fmt.Sprintf("model-00001-of-%05d.safetensors", n) || parsed.files[n-1] != fmt.Sprintf("model-%05d-of-%05d.safetensors", n, n) {
		t.Fatalf("shards %v", parsed.files)
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Model.Cfg != m.Cfg || ck.Model.DType != "BF16" {
		t.Fatalf("config %+v dtype %q", ck.Model.Cfg, ck.Model.DType)
	}
	for i, v := range m.Params.Data {
		if got, want := ck.Model.Params.Data[i], math.Float32frombits(uint32(floatToBF16(v))<<16); got != want {
			t.Fatalf("weight %d: %v, bf16 of %v is %v", i, got, v, want)
		}
	}
	// Saved again, the loaded model keeps its dtype: the same bytes.
	dir2 := filepath.Join(t.TempDir(), "again")
	if err := SaveWith(dir2, ck.Model, ck.Tokenizer, nil, SaveOptions{MaxShardBytes: 3000}); err != nil {
		t.Fatal(err)
	}
	for _, f := range parsed.files {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, err := os.ReadFile(filepath.Join(dir2, f))
		if err != nil || string(a) != string(b) {
			t.Fatalf("shard %s differs after a load and save (%v)", f, err)
		}
	}
	var cfg map[string]any
	data, _ := os.ReadFile(filepath.Join(dir, configFile))
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["torch_dtype"] != "bfloat16" || cfg["model_type"] != "qwen3" || cfg["head_dim"] != 6.0 {
		t.Fatalf("config.json %s", data)
	}
}

func TestShardedLoadRejectsBadInput(t *testing.T) {
	const q0 = "model.layers.0.self_attn.q_proj.weight"
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string, idx *shardIndex)
		want   []string
	}{
		{"index names a missing shard", func(t *testing.T, dir string, idx *shardIndex) {
			os.Remove(filepath.Join(dir, idx.files[1]))
		}, []string{"missing", "tensor"}},
		{"truncated shard", func(t *testing.T, dir string, idx *shardIndex) {
			f := idx.weightMap[q0]
			editFile(t, filepath.Join(dir, f), func(b []byte) []byte { return b[:len(b)-3] })
		}, []string{"truncated"}},
		{"tensor in another shard than the index says", func(t *testing.T, dir string, idx *shardIndex) {
			idx.weightMap[q0] = otherFile(idx, idx.weightMap[q0])
			writeIndex(t, dir, idx)
		}, []string{q0, "places it in"}},
		{"tensor missing from the index", func(t *testing.T, dir string, idx *shardIndex) {
			delete(idx.weightMap, q0)
			writeIndex(t, dir, idx)
		}, []string{q0, "is not in"}},
		{"index names a tensor no shard has", func(t *testing.T, dir string, idx *shardIndex) {
			idx.weightMap["model.layers.9.mlp.up_proj.weight"] = idx.files[0]
			writeIndex(t, dir, idx)
		}, []string{"model.layers.9.mlp.up_proj.weight", "does not hold it"}},
		{"shard path outside the folder", func(t *testing.T, dir string, idx *shardIndex) {
			editFile(t, filepath.Join(dir, indexFile), func(b []byte) []byte {
				return []byte(strings.Replace(string(b), `"`+idx.files[0]+`"`, `"../`+idx.files[0]+`"`, 1))
			})
		}, []string{indexFile, "not a .safetensors file name"}},
		{"shape contradicts config.json", func(t *testing.T, dir string, idx *shardIndex) {
			editConfig(t, dir, func(c map[string]any) { c["head_dim"] = 8 })
		}, []string{q0, "config.json implies", ".safetensors"}},
		{"non-finite weight", func(t *testing.T, dir string, idx *shardIndex) {
			f := filepath.Join(dir, idx.weightMap[q0])
			editFile(t, f, func(b []byte) []byte {
				h, err := parseHeader(bytesReader(b), int64(len(b)))
				if err != nil {
					t.Fatal(err)
				}
				e := h.entries[h.byName[q0]]
				binary.LittleEndian.PutUint16(b[h.dataStart+e.begin+2:], 0x7fc0) // bf16 NaN
				return b
			})
		}, []string{q0, "non-finite", "model-0000"}},
		{"bad index JSON", func(t *testing.T, dir string, idx *shardIndex) {
			editFile(t, filepath.Join(dir, indexFile), func([]byte) []byte { return []byte(`{"weight_map": {"a": 3}}`) })
		}, []string{indexFile, "file name"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := shardedCheckpoint(t)
			data, _ := os.ReadFile(filepath.Join(dir, indexFile))
			idx, err := parseIndex(data)
			if err != nil {
				t.Fatal(err)
			}
			c.break_(t, dir, idx)
			_, err = LoadModel(dir)
			expectErr(t, err, c.want...)
		})
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

func otherFile(idx *shardIndex, f string) string {
	for _, g := range idx.files {
		if g != f {
			return g
		}
	}
	return f
}

func writeIndex(t *testing.T, dir string, idx *shardIndex) {
	t.Helper()
	data, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": idx.weightMap})
	if err := os.WriteFile(filepath.Join(dir, indexFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHalfConversions checks the writer's rounding to F16 and BF16 against the reader's exact
// widening: every half value round-trips, and the midpoint between neighbours rounds to the
// even one.
func TestHalfConversions(t *testing.T) {
	for h := range 1 << 16 {
		v := halfToFloat(uint16(h))
		if math.IsNaN(float64(v)) {
			if got := floatToHalf(v); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("NaN %#04x became %#04x", h, got)
			}
			continue
		}
		if got := floatToHalf(v); got != uint16(h) {
			t.Fatalf("half %#04x (%v) came back as %#04x", h, v, got)
		}
		if b := math.Float32frombits(uint32(h) << 16); !math.IsNaN(float64(b)) && floatToBF16(b) != uint16(h) {
			t.Fatalf("bf16 %#04x came back as %#04x", h, floatToBF16(b))
		}
		// The midpoint to the next value up (same sign), exact in float32, goes to the even one.
		if h&0x7fff < 0x7bff {
			up := halfToFloat(uint16(h + 1))
			mid := float32((float64(v) + float64(up)) / 2)
			want := uint16(h)
			if h&1 == 1 {
				want = uint16(h + 1)
			}
			if got := floatToHalf(mid); got != want {
				t.Fatalf("midpoint %v of %#04x and %#04x rounded to %#04x", mid, h, h+1, got)
			}
		}
		if h&0x7fff < 0x7f7f {
			lo, hi := math.Float32frombits(uint32(h)<<16), math.Float32frombits(uint32(h+1)<<16)
			mid := float32((float64(lo) + float64(hi)) / 2)
			want := uint16(h)
			if h&1 == 1 {
				want = uint16(h + 1)
			}
			if got := floatToBF16(mid); got != want {
				t.Fatalf("bf16 midpoint %v of %#04x and %#04x rounded to %#04x", mid, h, h+1, got)
			}
		}
	}
	if got := floatToHalf(65520); got != 0x7c00 {
		t.Fatalf("65520 rounds to infinity in F16, got %#04x", got)
	}
	if got := floatToHalf(1e-9); got != 0 {
		t.Fatalf("1e-9 underflows to 0 in F16, got %#04x", got)
	}
}

func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"metadata": {"total_size": 12}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {}}`))
	f.Add([]byte(`{"weight_map": {"a": "../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map": {"a": 1}}`))
	f.Add([]byte(`{"weight_map": null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"weight_map": {"a": "x.safetensors"}} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := parseIndex(b)
		if err != nil {
			return
		}
		for name, file := range idx.weightMap {
			if name == "" || strings.ContainsAny(file, `/\`) || !strings.HasSuffix(file, ".safetensors") || file == filepath.Base(file) && file != filepath.Clean(file) {
				t.Fatalf("accepted tensor %q in %q", name, file)
			}
		}
		seen := map[string]bool{}
		for _, f := range idx.files {
			if seen[f] {
				t.Fatalf("file %q listed twice", f)
			}
			seen[f] = true
		}
	})
}

// FuzzParseConfig feeds config.json variants to the reader: it must return a valid config or an
// error, never panic, and a config it accepts must round-trip through encodeConfig.
func FuzzParseConfig(f *testing.F) {
	for _, fc := range familyCases() {
		data, err := encodeConfig(fc.cfg, specialIDs{}, fc.dtype)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"model_type": "qwen2", "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 4, "use_sliding_window": true, "sliding_window": 2, "max_window_layers": 0}`))
	f.Add([]byte(`{"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 8}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConfig(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
		data, err := encodeConfig(c, specialIDs{}, "F32")
		if err != nil {
			t.Fatal(err)
		}
		c2, err := parseConfig(data)
		if err != nil || c2 != c {
			t.Fatalf("round trip: %+v -> %+v (%v)", c, c2, err)
		}
	})
}

// A checkpoint with resume state, and any Save, keeps float32 weights whatever the source dtype,
// so that a resumed run continues exactly, recording the source dtype; SaveWith's default (an
// export) writes the source dtype.
func TestResumeCheckpointKeepsFloat32(t *testing.T) {
	dir, _ := shardedCheckpoint(t) // BF16
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ck.Model.Params.Data {
		ck.Model.Params.Data[i] += 1e-4 // no longer bf16 values
	}
	withState := filepath.Join(t.TempDir(), "resume")
	if err := SaveWith(withState, ck.Model, ck.Tokenizer, &State{Extra: json.RawMessage(`{}`)}, SaveOptions{MaxShardBytes: 3000}); err != nil {
		t.Fatal(err)
	}
	back, err := LoadModel(withState)
	if err != nil {
		t.Fatal(err)
	}
	shards, _ := filepath.Glob(filepath.Join(withState, "model-*.safetensors"))
	if len(shards) == 0 {
		t.Fatal("no shards")
	}
	for _, f := range shards {
		h, _, err := ReadSafetensors(f)
		if err != nil {
			t.Fatal(err)
		}
		for name, tn := range h {
			if tn.DType != "F32" {
				t.Fatalf("a resume checkpoint saved %s as %s", name, tn.DType)
			}
		}
	}
	if back.DType != "BF16" || firstDiff(back.Params.Data, ck.Model.Params.Data) >= 0 {
		t.Fatalf("a resume checkpoint read back as %s weights, not the exact float32 ones recording their bf16 source", back.DType)
	}
	// Save (a run's checkpoints, references and published weights) writes float32 too.
	plain := filepath.Join(t.TempDir(), "plain")
	if err := Save(plain, ck.Model, ck.Tokenizer, nil); err != nil {
		t.Fatal(err)
	}
	if back, err = LoadModel(plain); err != nil || firstDiff(back.Params.Data, ck.Model.Params.Data) >= 0 || back.DType != "BF16" {
		t.Fatalf("Save of a bf16-sourced model: %v, dtype %s", err, back.DType)
	}
	weightsOnly := filepath.Join(t.TempDir(), "export")
	if err := SaveWith(weightsOnly, ck.Model, ck.Tokenizer, nil, SaveOptions{MaxShardBytes: 3000}); err != nil {
		t.Fatal(err)
	}
	if back, err = LoadModel(weightsOnly); err != nil || back.DType != "BF16" {
		t.Fatalf("a weights-only save of a bf16 model: %v, dtype %s", err, back.DType)
	}
}
