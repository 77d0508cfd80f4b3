package code

import (
	"fmt"
	"math/rand/v2"
)

// templates is every kind of problem, drawn uniformly by seed. Four families: arithmetic over
// lists, string transforms, counting, and simple number theory.
var templates = []template{
	{family: "list", fn: "sum_above", draw: drawSumAbove},
	{family: "list", fn: "sum_first", draw: drawSumFirst},
	{family: "list", fn: "even_index_sum", draw: drawEvenIndexSum},
	{family: "list", fn: "count_between", draw: drawCountBetween},
	{family: "string", fn: "every_kth", draw: drawEveryKth},
	{family: "string", fn: "rotate_left", draw: drawRotateLeft},
	{family: "string", fn: "shift_letters", draw: drawShiftLetters},
	{family: "count", fn: "count_vowels", draw: drawCountVowels},
	{family: "count", fn: "long_words", draw: drawLongWords},
	{family: "count", fn: "count_multiples", draw: drawCountMultiples},
	{family: "number", fn: "digit_sum", draw: drawDigitSum},
	{family: "number", fn: "is_prime", draw: drawIsPrime},
	{family: "number", fn: "divisor_sum", draw: drawDivisorSum},
	{family: "number", fn: "fib", draw: drawFib},
}

// randInts is a list of 0 to maxLen ints in [lo, hi].
func randInts(r *rand.Rand, maxLen, lo, hi int) []int {
	xs := make([]int, r.IntN(maxLen+1))
	for i := range xs {
		xs[i] = lo + r.IntN(hi-lo+1)
	}
	return xs
}

func listArg(r *rand.Rand) []any { return []any{randInts(r, 8, 0, 12)} }

func ints(args []any) []int { return args[0].([]int) }

func drawSumAbove(r *rand.Rand) instance {
	k := r.IntN(10)
	sum := func(xs []int, strict bool) int {
		s := 0
		for _, x := range xs {
			if x > k || (!strict && x == k) {
				s += x
			}
		}
		return s
	}
	return instance{
		text:     fmt.Sprintf("Write def sum_above(xs): the sum of the numbers in list xs that are greater than %d.", k),
		solution: fmt.Sprintf("def sum_above(xs):\n    return sum(x for x in xs if x > %d)\n", k),
		buggy:    fmt.Sprintf("def sum_above(xs):\n    return sum(x for x in xs if x >= %d)\n", k),
		solve:    func(a []any) any { return sum(ints(a), true) },
		bug:      func(a []any) any { return sum(ints(a), false) },
		input:    listArg,
	}
}

func drawSumFirst(r *rand.Rand) instance {
	k := 1 + r.IntN(4)
	sum := func(xs []int, n int) int {
		s := 0
		for i := 0; i < n && i < len(xs); i++ {
			s += xs[i]
		}
		return s
	}
	return instance{
		text:     fmt.Sprintf("Write def sum_first(xs): the sum of the first %d numbers of list xs (all of them if it is shorter).", k),
		solution: fmt.Sprintf("def sum_first(xs):\n    return sum(xs[:%d])\n", k),
		buggy:    fmt.Sprintf("def sum_first(xs):\n    return sum(xs[:%d])\n", k+1),
		solve:    func(a []any) any { return sum(ints(a), k) },
		bug:      func(a []any) any { return sum(ints(a), k+1) },
		input:    listArg,
	}
}

func drawEvenIndexSum(r *rand.Rand) instance {
	sum := func(xs []int, from int) int {
		s := 0
		for i := from; i < len(xs); i += 2 {
			s += xs[i]
		}
		return s
	}
	return instance{
		text:     "Write def even_index_sum(xs): the sum of the elements of list xs at even positions (0, 2, 4, ...).",
		solution: "def even_index_sum(xs):\n    return sum(xs[0::2])\n",
		buggy:    "def even_index_sum(xs):\n    return sum(xs[1::2])\n",
		solve:    func(a []any) any { return sum(ints(a), 0) },
		bug:      func(a []any) any { return sum(ints(a), 1) },
		input:    listArg,
	}
}

func drawCountBetween(r *rand.Rand) instance {
	lo := r.IntN(6)
	hi := lo + 2 + r.IntN(5)
	count := func(xs []int, inclusive bool) int {
		n := 0
		for _, x := range xs {
			if x >= lo && (x < hi || (inclusive && x == hi)) {
				n++
			}
		}
		return n
	}
	return instance{
		text:     fmt.Sprintf("Write def count_between(xs): how many numbers in list xs are between %d and %d, both included.", lo, hi),
		solution: fmt.Sprintf("def count_between(xs):\n    return sum(1 for x in xs if %d <= x <= %d)\n", lo, hi),
		buggy:    fmt.Sprintf("def count_between(xs):\n    return sum(1 for x in xs if %d <= x < %d)\n", lo, hi),
		solve:    func(a []any) any { return count(ints(a), true) },
		bug:      func(a []any) any { return count(ints(a), false) },
		input:    listArg,
	}
}
