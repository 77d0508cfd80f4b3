package learn

import (
	"fmt"
	"sort"

	"github.com/agentrl/agentrl/model"
)

// Packed places sequences into the rows of one model.Batch (first-fit decreasing), several per
// row, so that short episodes do not pay for padding. Each sequence of n tokens contributes n-1
// positions: inputs x[0..n-2] and targets x[1..n-1]; a target is set only where want[j] is true
// for the target token j, so the model skips the rest.
type Packed struct {
	Batch model.Batch
	// Where[i] is the flat batch position of sequence i's first input token; token j (j >= 1) of
	// sequence i is predicted at position Where[i] + j - 1.
	Where []int
}

// Pack lays out seqs in rows of length rowLen. want[i][j] says whether token j of sequence i
// needs its logprob (nil means every token after the first). It is an error for a sequence to be
// longer than rowLen+1 tokens.
func Pack(seqs [][]int32, want [][]bool, rowLen int) (*Packed, error) {
	if rowLen < 1 {
		return nil, fmt.Errorf("learn: row length must be positive, got %d", rowLen)
	}
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
		if n := len(seqs[i]); n-1 > rowLen {
			return nil, fmt.Errorf("learn: sequence %d has %d tokens, more than a row of %d positions holds", i, n, rowLen)
		}
	}
	// Longest first, ties by index, so packing is deterministic.
	sort.SliceStable(order, func(a, b int) bool { return len(seqs[order[a]]) > len(seqs[order[b]]) })
	var free []int // free positions left in each row
	rowOf := make([]int, len(seqs))
	offOf := make([]int, len(seqs))
	for _, i := range order {
		need := max(len(seqs[i])-1, 0)
		row := -1
		for r, f := range free {
			if f >= need {
				row = r
				break
			}
		}
		if row < 0 {
			free = append(free, rowLen)
			row = len(free) - 1
		}
		rowOf[i], offOf[i] = row, rowLen-free[row]
		free[row] -= need
	}
	rows := max(len(free), 1)
	n := rows * rowLen
	p := &Packed{
		Batch: model.Batch{
			Rows: rows, T: rowLen,
			Tokens:  make([]int32, n),
			Targets: make([]int32, n),
			Pos:     make([]int32, n),
			Seg:     make([]int32, n),
		},
		Where: make([]int, len(seqs)),
	}
	b := &p.Batch
	for i := range b.Targets {
		b.Targets[i] = -1
		b.Seg[i] = -1 // padding: a segment of its own that no real token attends to
	}
	for i, s := range seqs {
		base := rowOf[i]*rowLen + offOf[i]
		p.Where[i] = base
		for j := 0; j+1 < len(s); j++ {
			b.Tokens[base+j] = s[j]
			b.Pos[base+j] = int32(j)
			b.Seg[base+j] = int32(i)
			if want == nil || want[i] == nil || want[i][j+1] {
				b.Targets[base+j] = s[j+1]
			}
		}
	}
	return p, nil
}

// Gather copies the per-position values of sequence i back to per-token order: dst[j] for
// token j >= 1 (dst[0] is left alone, nothing predicts the first token).
func (p *Packed) Gather(dst []float32, i int, vals []float32) {
	base := p.Where[i]
	for j := 1; j < len(dst); j++ {
		dst[j] = vals[base+j-1]
	}
}

// Scatter is the inverse of Gather: it writes per-token values of sequence i into positions.
func (p *Packed) Scatter(vals []float32, i int, src []float32) {
	base := p.Where[i]
	for j := 1; j < len(src); j++ {
		vals[base+j-1] = src[j]
	}
}
