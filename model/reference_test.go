package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refLlama is an independent, naive float64 implementation of the Hugging Face Llama forward
// pass (LlamaForCausalLM: RMSNorm, rotate_half RoPE, grouped-query causal attention, SwiGLU),
// written from the architecture's definition and reading weights only by their HF names. The
// model's own tests check its paths against each other (gradients against finite differences,
// decoding against the full forward); this one checks that the function they all compute is
// Llama's.
type refLlama struct {
	cfg Config
	w   map[string][]float32
}

func newRefLlama(m *Model) *refLlama {
	r := &refLlama{cfg: m.Cfg, w: map[string][]float32{}}
	for _, t := range m.Params.Tensors() {
		r.w[t.Name] = t.Data
	}
	return r
}

func (r *refLlama) get(name string) []float32 {
	w, ok := r.w[name]
	if !ok {
		panic("reference: no tensor " + name)
	}
	return w
}

// matvec returns W·x for W of shape (rows, len(x)).
func matvec(w []float32, x []float64, rows int) []float64 {
	n := len(x)
	out := make([]float64, rows)
	for i := range out {
		var s float64
		for j := 0; j < n; j++ {
			s += float64(w[i*n+j]) * x[j]
		}
		out[i] = s
	}
	return out
}

func (r *refLlama) rmsnorm(x []float64, w []float32) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+float64(r.cfg.NormEps))
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * inv * float64(w[i])
	}
	return out
}

// rope rotates one head vector at position pos with HF's rotate_half convention.
func (r *refLlama) rope(x []float64, pos int) {
	hd := len(x)
	half := hd / 2
	for i := 0; i < half; i++ {
		f := math.Pow(float64(r.cfg.RopeTheta), -2*float64(i)/float64(hd))
		c, s := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
		a, b := x[i], x[i+half]
		x[i] = a*c - b*s
		x[i+half] = b*c + a*s
	}
}

// logprobs returns, for a single sequence, log p(tokens[t+1] | tokens[:t+1]) for each t.
func (r *refLlama) logprobs(tokens []int32) []float64 {
	c := r.cfg
	D, H, KV, hd := c.Dim, c.Heads, c.KVHeads, c.HeadDim()
	T := len(tokens)
	emb := r.get("model.embed_tokens.weight")
	x := make([][]float64, T)
	for t, tok := range tokens {
		x[t] = make([]float64, D)
		for i := range x[t] {
			x[t][i] = float64(emb[int(tok)*D+i])
		}
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			h := r.rmsnorm(x[t], r.get(p+"input_layernorm.weight"))
			q[t] = matvec(r.get(p+"self_attn.q_proj.weight"), h, H*hd)
			k[t] = matvec(r.get(p+"self_attn.k_proj.weight"), h, KV*hd)
			v[t] = matvec(r.get(p+"self_attn.v_proj.weight"), h, KV*hd)
			for hh := 0; hh < H; hh++ {
				r.rope(q[t][hh*hd:(hh+1)*hd], t)
			}
			for hh := 0; hh < KV; hh++ {
				r.rope(k[t][hh*hd:(hh+1)*hd], t)
			}
		}
		for t := 0; t < T; t++ {
			att := make([]float64, H*hd)
			for hh := 0; hh < H; hh++ {
				g := hh / (H / KV)
				scores := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					var dot float64
					for i := 0; i < hd; i++ {
						dot += q[t][hh*hd+i] * k[s][g*hd+i]
					}
					scores[s] = dot / math.Sqrt(float64(hd))
					mx = math.Max(mx, scores[s])
				}
				var z float64
				for s := range scores {
					scores[s] = math.Exp(scores[s] - mx)
					z += scores[s]
				}
				for s := range scores {
					for i := 0; i < hd; i++ {
						att[hh*hd+i] += scores[s] / z * v[s][g*hd+i]
					}
				}
			}
			o := matvec(r.get(p+"self_attn.o_proj.weight"), att, D)
			for i := range o {
				x[t][i] += o[i]
			}
			h := r.rmsnorm(x[t], r.get(p+"post_attention_layernorm.weight"))
			gate := matvec(r.get(p+"mlp.gate_proj.weight"), h, c.Hidden)
			up := matvec(r.get(p+"mlp.up_proj.weight"), h, c.Hidden)
			for i := range gate {
				gate[i] = gate[i] / (1 + math.Exp(-gate[i])) * up[i]
			}
			down := matvec(r.get(p+"mlp.down_proj.weight"), gate, D)
			for i := range down {
				x[t][i] += down[i]
			}
		}
	}
	head := "lm_head.weight"
	if c.TieEmbeddings {
		head = "model.embed_tokens.weight"
	}
	out := make([]float64, T-1)
	for t := 0; t+1 < T; t++ {
		h := r.rmsnorm(x[t], r.get("model.norm.weight"))
		logits := matvec(r.get(head), h, c.Vocab)
		mx := math.Inf(-1)
		for _, l := range logits {
			mx = math.Max(mx, l)
		}
		var z float64
		for _, l := range logits {
			z += math.Exp(l - mx)
		}
		out[t] = logits[tokens[t+1]] - mx - math.Log(z)
	}
	return out
}

// The model computes the Hugging Face Llama function: its logprobs match the naive reference,
// for several architectures, on packed rows.
func TestForwardMatchesReferenceLlama(t *testing.T) {
	cfgs := []Config{
		{Vocab: 50, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 48, MaxSeq: 64, RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true},
		{Vocab: 70, Dim: 48, Layers: 1, Heads: 3, KVHeads: 3, Hidden: 80, MaxSeq: 64, RopeTheta: 500, NormEps: 1e-6, TieEmbeddings: false},
		{Vocab: 40, Dim: 64, Layers: 2, Heads: 8, KVHeads: 1, Hidden: 96, MaxSeq: 128, RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: true},
	}
	for ci, cfg := range cfgs {
		m, err := New(cfg, uint64(ci+1))
		if err != nil {
			t.Fatal(err)
		}
		// Larger-than-init weights make attention far from uniform, so a wrong pattern shows.
		rng := rand.New(rand.NewPCG(uint64(ci), 9))
		for i := range m.Params.Data {
			m.Params.Data[i] *= 1 + 2*float32(rng.Float64())
		}
		ref := newRefLlama(m)
		seqs := [][]int32{make([]int32, 37), make([]int32, 21), make([]int32, 9)}
		for _, s := range seqs {
			for i := range s {
				s[i] = int32(rng.IntN(cfg.Vocab))
			}
		}
		// Pack the three sequences into one row of 64 positions, with padding.
		T := 64
		b := &Batch{Rows: 1, T: T, Tokens: make([]int32, T), Targets: make([]int32, T), Pos: make([]int32, T), Seg: make([]int32, T)}
		for i := range b.Targets {
			b.Targets[i], b.Seg[i] = -1, 99
		}
		off := 0
		starts := make([]int, len(seqs))
		for si, s := range seqs {
			starts[si] = off
			for j := 0; j+1 < len(s); j++ {
				b.Tokens[off+j], b.Targets[off+j], b.Pos[off+j], b.Seg[off+j] = s[j], s[j+1], int32(j), int32(si)
			}
			off += len(s) - 1
		}
		lp := make([]float32, T)
		ent := make([]float32, T)
		if err := m.Forward(b, lp, ent); err != nil {
			t.Fatal(err)
		}
		for si, s := range seqs {
			want := ref.logprobs(s)
			for j, w := range want {
				got := float64(lp[starts[si]+j])
				if math.Abs(got-w) > 2e-3*math.Max(1, math.Abs(w)) {
					t.Fatalf("config %d sequence %d position %d: model logprob %.6f, reference Llama %.6f", ci, si, j, got, w)
				}
			}
		}
	}
}
