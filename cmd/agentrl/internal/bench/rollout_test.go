package bench

import (
	"context"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

func TestMeasureAndMemory(t *testing.T) {
	envs := all.Builtins()
	tok, err := Tokenizer(envs, []string{"calc"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Measure(context.Background(), envs, "calc", tok, 2, 8, 40)
	if err != nil {
		t.Fatal(err)
	}
	if r.Episodes != 40 || r.Steps != 80 || r.Wall <= 0 {
		t.Fatalf("measured %d episodes, %d steps in %s; want 40 expert episodes of 2 steps", r.Episodes, r.Steps, r.Wall)
	}
	over, err := MeasureOverhead(context.Background(), envs, "calc", tok, 8, 40, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(over) != 3 || over[0].PerStep > over[2].PerStep {
		t.Fatalf("overhead rounds %v, want 3 sorted", over)
	}
	m, err := Memory(context.Background(), tok, 64, 300)
	if err != nil {
		t.Fatal(err)
	}
	if m.Episodes != 64 || m.TokensEach < 300 || m.TotalInFlight == 0 {
		t.Fatalf("memory measurement: %+v", m)
	}
}
