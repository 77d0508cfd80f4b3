package traj

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// genTrajectory builds a realistic multi-turn trajectory of about n tokens: a system prompt and
// user message, then assistant completions (sampled, with logprobs and a policy version that
// advances now and then, as in async training) each answered by a tool or env observation.
func genTrajectory(rng *rand.Rand, n int, vocab int32) *Trajectory {
	t := &Trajectory{
		ID: fmt.Sprintf("run-%d", rng.Uint32()), Env: "calc", TaskSeed: rng.Int64N(1 << 40),
		GroupID: rng.Uint64N(1 << 20), Status: StatusOK,
		Timings: Timings{Generate: time.Duration(rng.Int64N(1e10)), Env: time.Duration(rng.Int64N(1e9)),
			Tokenize: time.Duration(rng.Int64N(1e7)), Total: time.Duration(rng.Int64N(1e11))},
		Meta: []KV{{"answer", "42"}, {"difficulty", "3"}},
	}
	// Token frequencies in text are close to Zipf's law; BPE ids roughly follow frequency.
	zipf := rand.NewZipf(rng, 1.1, 2, uint64(max(vocab-1, 1)))
	push := func(role Role, k int, version int32) {
		for i := 0; i < k && len(t.Tokens) < n; i++ {
			t.Tokens = append(t.Tokens, int32(zipf.Uint64()))
			t.Roles = append(t.Roles, role)
			sampled := role == RoleAssistant
			t.LossMask = append(t.LossMask, sampled)
			if sampled {
				t.Logprobs = append(t.Logprobs, -float32(rng.ExpFloat64()))
				t.Versions = append(t.Versions, version)
			} else {
				t.Logprobs = append(t.Logprobs, 0)
				t.Versions = append(t.Versions, NoVersion)
			}
		}
	}
	push(RoleSystem, 40+rng.IntN(80), 0)
	push(RoleUser, 20+rng.IntN(60), 0)
	version := int32(rng.IntN(100))
	for len(t.Tokens) < n {
		start := len(t.Tokens)
		push(RoleAssistant, 50+rng.IntN(250), version)
		end := len(t.Tokens)
		role := RoleEnv
		var calls []ToolCall
		if rng.IntN(2) == 0 {
			role = RoleTool
			calls = []ToolCall{{Name: "calculator", Arguments: `{"expr":"2+2"}`, Result: "4"}}
		}
		push(role, 10+rng.IntN(100), 0)
		t.Turns = append(t.Turns, Turn{Start: start, End: end, ObsEnd: len(t.Tokens),
			Reward: rng.Float64() - 0.5, ToolCalls: calls})
		if rng.IntN(3) == 0 {
			version++
		}
	}
	t.Reward = float64(rng.IntN(2))
	return t
}

// oddTrajectory exercises every awkward value: NaN payloads, signed zeros, infinities,
// denormals, extreme integers, strings that are not UTF-8 or need escaping.
func oddTrajectory() *Trajectory {
	lps := []float32{
		0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00000), math.Float32frombits(0x7fc00001), math.Float32frombits(0xffffffff),
		math.Float32frombits(0x7f800001), math.Float32frombits(1), math.MaxFloat32, -math.SmallestNonzeroFloat32, -1.5,
	}
	n := len(lps)
	t := &Trajectory{
		ID: "odd\x00\xff\"\\\n\u2028", Env: "é\t<&>\u2028", TaskSeed: math.MinInt64, GroupID: math.MaxUint64,
		Reward: math.Float64frombits(0x7ff0000000000001), Status: StatusEnvError, Error: "boom \xc3",
		Timings: Timings{Generate: math.MinInt64, Env: math.MaxInt64, Total: -1},
		Meta:    []KV{{"", ""}, {"k\xfe", "v\x01"}},
	}
	for i := 0; i < n; i++ {
		tok := int32(math.MaxInt32)
		if i%2 == 1 {
			tok = math.MinInt32
		}
		t.Tokens = append(t.Tokens, tok)
		t.Roles = append(t.Roles, RoleAssistant)
		t.LossMask = append(t.LossMask, i%3 != 0)
		t.Logprobs = append(t.Logprobs, lps[i])
		t.Versions = append(t.Versions, int32(i*1000003)-math.MaxInt32)
	}
	t.Roles[n-1] = RoleTool
	t.LossMask[n-1] = false
	t.Turns = []Turn{
		{Start: 0, End: 0, ObsEnd: 0, Reward: math.Copysign(0, -1)},
		{Start: 0, End: 5, ObsEnd: 5, Reward: math.Inf(-1), ToolCalls: []ToolCall{{Name: "", Arguments: "{\xff", Result: "", Error: "bad"}}},
		{Start: 7, End: n - 1, ObsEnd: n, Reward: math.NaN(), ToolCalls: []ToolCall{{Name: "a"}, {Name: "b", Result: "r"}}},
	}
	return t
}
