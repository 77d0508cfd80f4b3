package learn

import (
	"testing"

	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

func TestDecaySegments(t *testing.T) {
	for _, tied := range []bool{true, false} {
		cfg := model.Config{Vocab: 32, Dim: 8, Layers: 2, Heads: 2, KVHeads: 1, Hidden: 12, MaxSeq: 16,
			RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: tied}
		m, err := model.New(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		hd := cfg.HeadDim()
		attn := (cfg.Heads+2*cfg.KVHeads)*hd*cfg.Dim + cfg.Dim*cfg.Heads*hd
		mlp := 3 * cfg.Hidden * cfg.Dim
		embed := cfg.Vocab * cfg.Dim
		// Storage order: embeddings, then per layer input norm, q/k/v/o, post-attention norm,
		// gate/up/down, then the final norm and (untied) the LM head.
		lens := []int{embed}
		decay := []bool{true}
		for range cfg.Layers {
			lens = append(lens, cfg.Dim, attn, cfg.Dim, mlp)
			decay = append(decay, false, true, false, true)
		}
		lens = append(lens, cfg.Dim)
		decay = append(decay, false)
		if !tied {
			lens = append(lens, embed)
			decay = append(decay, true)
		}
		segs := DecaySegments(&m.Params)
		if len(segs) != len(lens) {
			t.Fatalf("tied=%v: %d segments %+v, want %d", tied, len(segs), segs, len(lens))
		}
		off := 0
		for i, s := range segs {
			if s != (optim.Segment{Off: off, Len: lens[i], Decay: decay[i]}) {
				t.Errorf("tied=%v: segment %d is %+v, want {%d %d %v}", tied, i, s, off, lens[i], decay[i])
			}
			off += lens[i]
		}
		if off != m.NumParams() {
			t.Errorf("tied=%v: segments cover %d of %d floats", tied, off, m.NumParams())
		}
		if _, err := optim.NewAdamW(optim.DefaultConfig(), m.NumParams(), segs); err != nil {
			t.Errorf("tied=%v: AdamW rejects the segments: %v", tied, err)
		}
	}
}
