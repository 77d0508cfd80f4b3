package code

import (
	"context"
	"testing"
)

// BenchmarkGrade measures grading one correct answer: harness build, one sandbox run over the
// hidden cases, verdict.
func BenchmarkGrade(b *testing.B) {
	needSandbox(b)
	e, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const seed = 11
	answer := answerText(newProblem(seed).solution)
	for b.Loop() {
		if _, err := e.Reset(ctx, seed); err != nil {
			b.Fatal(err)
		}
		tr, err := e.Step(ctx, answer)
		if err != nil || tr.Reward != 1 {
			b.Fatalf("grade: %v %+v", err, tr)
		}
	}
}
