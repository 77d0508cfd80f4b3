package search

import (
	"strings"

	"github.com/agentrl/agentrl/reward"
)

// grade scores a final turn: its answer line against the gold name under reward.NormalizeName
// (case, punctuation and spacing ignored, a leading article dropped: "The Miravo." matches
// "Miravo").
var grade = reward.ExactMatch{
	Extract:   func(action string) (string, bool) { return answerText(action), true },
	Normalize: reward.NormalizeName,
}

// answerText extracts the answer from a final turn: the rest of the line after the last
// "Answer:" (any case), or the whole turn when it has none.
func answerText(action string) string {
	lower := strings.ToLower(action)
	if i := strings.LastIndex(lower, "answer:"); i >= 0 {
		rest := action[i+len("answer:"):]
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[:nl]
		}
		return rest
	}
	return action
}
