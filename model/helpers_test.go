package model

import (
	"math/rand/v2"
	"testing"
)

// tinyConfig is small enough for finite differences over every tensor and still has grouped
// query heads (4 query heads over 2 key/value heads) and two layers.
func tinyConfig(tied bool) Config {
	return Config{Vocab: 13, Dim: 16, Layers: 2, Heads: 4, KVHeads: 2, Hidden: 24, MaxSeq: 32,
		RopeTheta: 10000, NormEps: 1e-5, TieEmbeddings: tied}
}

func newTestModel(t *testing.T, cfg Config, seed uint64) *Model {
	t.Helper()
	m, err := New(cfg, seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// packedBatch packs seqs (token lists) into rows of length T in order, a new row starting when
// the next sequence does not fit; targets are the next token within each sequence (-1 at its
// end and on padding). Padding tokens form their own sequence.
func packedBatch(t *testing.T, T int, seqs ...[]int32) *Batch {
	t.Helper()
	var rows [][]int32
	var cur []int32
	for _, s := range seqs {
		if len(s) > T {
			t.Fatalf("sequence of %d does not fit T=%d", len(s), T)
		}
		if len(cur)+len(s) > T {
			rows = append(rows, cur)
			cur = nil
		}
		cur = append(cur, s...)
		_ = cur
	}
	rows = append(rows, cur)
	b := &Batch{Rows: len(rows), T: T}
	n := b.Rows * T
	b.Tokens, b.Targets, b.Pos, b.Seg = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	row, col, seg := 0, 0, int32(0)
	for _, s := range seqs {
		if col+len(s) > T {
			fillPad(b, row, col, seg)
			row, col, seg = row+1, 0, 0
		}
		for j, tok := range s {
			i := row*T + col + j
			b.Tokens[i], b.Pos[i], b.Seg[i] = tok, int32(j), seg
			b.Targets[i] = -1
			if j+1 < len(s) {
				b.Targets[i] = s[j+1]
			}
		}
		col += len(s)
		seg++
	}
	fillPad(b, row, col, seg)
	return b
}

func fillPad(b *Batch, row, col int, seg int32) {
	for j := col; j < b.T; j++ {
		i := row*b.T + j
		b.Tokens[i], b.Targets[i], b.Pos[i], b.Seg[i] = 0, -1, int32(j-col), seg
	}
}

func randTokens(rng *rand.Rand, n, vocab int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(rng.IntN(vocab))
	}
	return s
}

func forward(t *testing.T, m *Model, b *Batch) (lp, ent []float32) {
	t.Helper()
	n := b.Rows * b.T
	lp, ent = make([]float32, n), make([]float32, n)
	if err := m.Forward(b, lp, ent); err != nil {
		t.Fatal(err)
	}
	return lp, ent
}
