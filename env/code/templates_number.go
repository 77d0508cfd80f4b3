package code

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

func num(args []any) int { return args[0].(int) }

func numArg(lo, hi int) func(r *rand.Rand) []any {
	return func(r *rand.Rand) []any { return []any{lo + r.IntN(hi-lo+1)} }
}

func drawCountMultiples(r *rand.Rand) instance {
	k := 2 + r.IntN(5)
	count := func(n, upTo int) int {
		c := 0
		for i := 1; i <= upTo; i++ {
			if i%k == 0 {
				c++
			}
		}
		return c
	}
	return instance{
		text:     fmt.Sprintf("Write def count_multiples(n): how many of the numbers 1, 2, ..., n are divisible by %d.", k),
		solution: fmt.Sprintf("def count_multiples(n):\n    return sum(1 for i in range(1, n + 1) if i %% %d == 0)\n", k),
		buggy:    fmt.Sprintf("def count_multiples(n):\n    return sum(1 for i in range(1, n) if i %% %d == 0)\n", k),
		solve:    func(a []any) any { return count(num(a), num(a)) },
		bug:      func(a []any) any { return count(num(a), num(a)-1) },
		input:    numArg(0, 60),
	}
}

func drawDigitSum(*rand.Rand) instance {
	return instance{
		text:     "Write def digit_sum(n): the sum of the decimal digits of the integer n >= 0.",
		solution: "def digit_sum(n):\n    return sum(int(d) for d in str(n))\n",
		// Stops one digit early: the leading digit is never added.
		buggy: "def digit_sum(n):\n    s = 0\n    while n > 9:\n        s += n % 10\n        n //= 10\n    return s\n",
		solve: func(a []any) any {
			s := 0
			for _, d := range strconv.Itoa(num(a)) {
				s += int(d - '0')
			}
			return s
		},
		bug: func(a []any) any {
			s, n := 0, num(a)
			for n > 9 {
				s += n % 10
				n /= 10
			}
			return s
		},
		input: func(r *rand.Rand) []any { return []any{r.IntN(1_000_000)} },
	}
}

// isqrt is the largest m with m*m <= n, which is what Python's int(n ** 0.5) gives for the
// small n used here.
func isqrt(n int) int {
	m := 0
	for (m+1)*(m+1) <= n {
		m++
	}
	return m
}

func drawIsPrime(*rand.Rand) instance {
	prime := func(n, bound int) bool {
		if n < 2 {
			return false
		}
		for d := 2; d < bound; d++ {
			if n%d == 0 {
				return false
			}
		}
		return true
	}
	return instance{
		text:     "Write def is_prime(n): True if the integer n is a prime number, else False.",
		solution: "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n",
		// The classic bound error: misses the square root itself, so 4, 9, 25 look prime.
		buggy: "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, int(n ** 0.5)))\n",
		solve: func(a []any) any { return prime(num(a), isqrt(num(a))+1) },
		bug:   func(a []any) any { return prime(num(a), isqrt(num(a))) },
		input: numArg(0, 100),
	}
}

func drawDivisorSum(*rand.Rand) instance {
	sum := func(n, upTo int) int {
		s := 0
		for d := 1; d <= upTo; d++ {
			if n%d == 0 {
				s += d
			}
		}
		return s
	}
	return instance{
		text:     "Write def divisor_sum(n): the sum of the divisors of n >= 1 that are smaller than n.",
		solution: "def divisor_sum(n):\n    return sum(d for d in range(1, n) if n % d == 0)\n",
		buggy:    "def divisor_sum(n):\n    return sum(d for d in range(1, n + 1) if n % d == 0)\n",
		solve:    func(a []any) any { return sum(num(a), num(a)-1) },
		bug:      func(a []any) any { return sum(num(a), num(a)) },
		input:    numArg(1, 100),
	}
}

func drawFib(*rand.Rand) instance {
	fib := func(n int) (a, b int) {
		a, b = 0, 1
		for range n {
			a, b = b, a+b
		}
		return a, b
	}
	return instance{
		text:     "Write def fib(n): the n-th Fibonacci number, where fib(0) == 0 and fib(1) == 1.",
		solution: "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
		buggy:    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return b\n",
		solve:    func(a []any) any { x, _ := fib(num(a)); return x },
		bug:      func(a []any) any { _, y := fib(num(a)); return y },
		input:    numArg(0, 30),
	}
}
