package eval

import (
	"math"
	"testing"
)

// PassAtK against the closed form 1 − C(n−c, k)/C(n, k), worked by hand.
func TestPassAtK(t *testing.T) {
	for _, tc := range []struct {
		n, c, k int
		want    float64
	}{
		{8, 0, 1, 0},
		{8, 8, 8, 1},
		{8, 2, 1, 0.25},         // c/n
		{4, 1, 2, 0.5},          // 1 − C(3,2)/C(4,2) = 1 − 3/6
		{5, 2, 3, 1 - 1.0/10.0}, // 1 − C(3,3)/C(5,3)
		{3, 2, 2, 1},            // n − c < k
	} {
		if got := PassAtK(tc.n, tc.c, tc.k); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("PassAtK(%d, %d, %d) = %v, want %v", tc.n, tc.c, tc.k, got, tc.want)
		}
	}
}
