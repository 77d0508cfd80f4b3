package search

import "github.com/agentrl/agentrl/reward"

// grade scores a final turn: its answer line (reward.AnswerLine: the rest of the line after the
// last "Answer:", or the whole turn) against the gold name under reward.NormalizeName
// (case, punctuation and spacing ignored, a leading article dropped: "The Miravo." matches
// "Miravo").
var grade = reward.ExactMatch{
	Extract:   reward.AnswerLine,
	Normalize: reward.NormalizeName,
}
