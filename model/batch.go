package model

import "fmt"

// Batch is a packed training batch of Rows×T tokens. Several sequences may share a row: Seg
// gives each token's sequence id within its row, and each sequence must occupy one contiguous
// span of the row. Attention never crosses a sequence boundary, and Pos (the position used by
// RoPE) restarts per sequence. Targets holds the next token to predict at each position, or -1
// where nothing is predicted (prompts, tool output, padding).
type Batch struct {
	Rows, T int
	Tokens  []int32 // (Rows, T)
	Targets []int32 // (Rows, T); -1 = no target
	Pos     []int32 // (Rows, T) position within its sequence, < MaxSeq
	Seg     []int32 // (Rows, T) sequence id within the row
}

// span is one sequence's run of tokens within a row: tokens [start, end) of row.
type span struct{ row, start, end int }

// check validates b against c and returns its sequence spans in row order.
func (b *Batch) check(c Config, spans []span) ([]span, error) {
	if b == nil {
		return nil, fmt.Errorf("model: nil batch")
	}
	if b.Rows <= 0 || b.T <= 0 {
		return nil, fmt.Errorf("model: batch needs positive Rows and T, got %d×%d", b.Rows, b.T)
	}
	n := b.Rows * b.T
	for _, f := range []struct {
		name string
		s    []int32
	}{{"Tokens", b.Tokens}, {"Targets", b.Targets}, {"Pos", b.Pos}, {"Seg", b.Seg}} {
		if len(f.s) != n {
			return nil, fmt.Errorf("model: batch %s has %d entries, want Rows×T = %d", f.name, len(f.s), n)
		}
	}
	for i := 0; i < n; i++ {
		if t := b.Tokens[i]; t < 0 || int(t) >= c.Vocab {
			return nil, fmt.Errorf("model: token %d at row %d col %d is outside the vocabulary of %d", t, i/b.T, i%b.T, c.Vocab)
		}
		if t := b.Targets[i]; t < -1 || int(t) >= c.Vocab {
			return nil, fmt.Errorf("model: target %d at row %d col %d is neither -1 nor in the vocabulary of %d", t, i/b.T, i%b.T, c.Vocab)
		}
		if p := b.Pos[i]; p < 0 || int(p) >= c.MaxSeq {
			return nil, fmt.Errorf("model: position %d at row %d col %d is outside [0, MaxSeq=%d)", p, i/b.T, i%b.T, c.MaxSeq)
		}
	}
	spans = spans[:0]
	for r := 0; r < b.Rows; r++ {
		seg := b.Seg[r*b.T : (r+1)*b.T]
		first := len(spans)
		start := 0
		for j := 1; j <= b.T; j++ {
			if j < b.T && seg[j] == seg[start] {
				continue
			}
			for _, s := range spans[first:] {
				if seg[s.start] == seg[start] {
					return nil, fmt.Errorf("model: sequence %d of row %d is not contiguous (it resumes at col %d)", seg[start], r, start)
				}
			}
			spans = append(spans, span{row: r, start: start, end: j})
			start = j
		}
	}
	return spans, nil
}
