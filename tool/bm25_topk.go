package tool

import "slices"

// better is the result order: higher score first, then lower document position.
func better(a, b Hit) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Doc < b.Doc
}

// topK keeps the k best hits seen so far in a binary heap whose root is the worst of them, so
// each offer is O(log k) and selecting from n candidates is O(n log k) rather than a full sort.
type topK struct {
	k int
	h []Hit
}

// reset empties t to keep the k best of new hits, keeping its storage.
func (t *topK) reset(k int) {
	t.k = k
	t.h = t.h[:0]
}

func (t *topK) offer(x Hit) {
	if len(t.h) < t.k {
		t.h = append(t.h, x)
		t.up(len(t.h) - 1)
		return
	}
	if !better(x, t.h[0]) {
		return
	}
	t.h[0] = x
	t.down(0)
}

// up and down maintain the heap property "a parent is worse than its children".
func (t *topK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !better(t.h[p], t.h[i]) {
			return
		}
		t.h[p], t.h[i] = t.h[i], t.h[p]
		i = p
	}
}

func (t *topK) down(i int) {
	n := len(t.h)
	for {
		worst := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < n && better(t.h[worst], t.h[c]) {
				worst = c
			}
		}
		if worst == i {
			return
		}
		t.h[i], t.h[worst] = t.h[worst], t.h[i]
		i = worst
	}
}

// sorted returns the kept hits best first.
func (t *topK) sorted() []Hit {
	out := t.h
	slices.SortFunc(out, func(a, b Hit) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	return out
}
