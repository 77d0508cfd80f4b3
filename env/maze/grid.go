package maze

import (
	"math/rand/v2"
)

// Direction bits of grid.open: a set bit means the passage that way is open.
const (
	up uint8 = 1 << iota
	down
	left
	right
)

// moves lists the four moves in a fixed order; the order matters for determinism (BFS ties and
// generation both iterate it).
var moves = [4]struct {
	name   string
	bit    uint8
	dx, dy int
	back   uint8
}{
	{"up", up, 0, -1, down},
	{"down", down, 0, 1, up},
	{"left", left, -1, 0, right},
	{"right", right, 1, 0, left},
}

// grid is a rectangular maze of W×H cells; walls lie between cells and around the border.
type grid struct {
	W, H int
	open []uint8 // per cell y*W+x: direction bits of open passages
}

// cell is a position; X grows to the right, Y downwards.
type cell struct{ X, Y int }

func (g *grid) in(c cell) bool                { return c.X >= 0 && c.X < g.W && c.Y >= 0 && c.Y < g.H }
func (g *grid) idx(c cell) int                { return c.Y*g.W + c.X }
func (g *grid) isOpen(c cell, bit uint8) bool { return g.open[g.idx(c)]&bit != 0 }

// carve generates a perfect maze (every cell reachable, exactly one path between any two) with an
// iterative randomized depth-first search, then opens each remaining interior wall with
// probability braid. Loops make the maze kinder to a greedy policy: a perfect maze punishes
// heading towards the goal with long dead ends, which a tiny policy cannot plan around.
func carve(w, h int, braid float64, rng *rand.Rand) *grid {
	g := &grid{W: w, H: h, open: make([]uint8, w*h)}
	seen := make([]bool, w*h)
	start := cell{rng.IntN(w), rng.IntN(h)}
	stack := []cell{start}
	seen[g.idx(start)] = true
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		var cand [4]int
		n := 0
		for i, m := range moves {
			nb := cell{c.X + m.dx, c.Y + m.dy}
			if g.in(nb) && !seen[g.idx(nb)] {
				cand[n] = i
				n++
			}
		}
		if n == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		m := moves[cand[rng.IntN(n)]]
		nb := cell{c.X + m.dx, c.Y + m.dy}
		g.open[g.idx(c)] |= m.bit
		g.open[g.idx(nb)] |= m.back
		seen[g.idx(nb)] = true
		stack = append(stack, nb)
	}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := cell{x, y}
			for _, i := range [2]int{1, 3} { // down and right: each interior wall once
				m := moves[i]
				nb := cell{x + m.dx, y + m.dy}
				if g.in(nb) && !g.isOpen(c, m.bit) && rng.Float64() < braid {
					g.open[g.idx(c)] |= m.bit
					g.open[g.idx(nb)] |= m.back
				}
			}
		}
	}
	return g
}

// distances returns the BFS distance from src to every cell (-1 where unreachable).
func (g *grid) distances(src cell) []int {
	dist := make([]int, g.W*g.H)
	for i := range dist {
		dist[i] = -1
	}
	dist[g.idx(src)] = 0
	queue := []cell{src}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, m := range moves {
			nb := cell{c.X + m.dx, c.Y + m.dy}
			if g.isOpen(c, m.bit) && dist[g.idx(nb)] < 0 {
				dist[g.idx(nb)] = dist[g.idx(c)] + 1
				queue = append(queue, nb)
			}
		}
	}
	return dist
}

// step applies move i from c: the new cell, or c itself and false when a wall is in the way.
func (g *grid) step(c cell, i int) (cell, bool) {
	m := moves[i]
	if !g.isOpen(c, m.bit) {
		return c, false
	}
	return cell{c.X + m.dx, c.Y + m.dy}, true
}

// bestMove returns the index of a move on a shortest path from c to goal (the first in moves
// order on ties), or -1 when c is the goal or cannot reach it. distToGoal is distances(goal).
func (g *grid) bestMove(c cell, distToGoal []int) int {
	d := distToGoal[g.idx(c)]
	if d <= 0 {
		return -1
	}
	for i := range moves {
		if nb, ok := g.step(c, i); ok && distToGoal[g.idx(nb)] == d-1 {
			return i
		}
	}
	return -1
}
