package search

import (
	"context"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
)

// BenchmarkWorldBuild is the one-time start-up cost: generate the knowledge base, render its
// documents, index them.
func BenchmarkWorldBuild(b *testing.B) {
	for b.Loop() {
		k := buildKB()
		docs := make([]tool.Doc, len(k.ents))
		for i := range k.ents {
			docs[i] = tool.Doc{Title: k.ents[i].name, Text: k.doc(int32(i))}
		}
		if _, err := tool.NewIndex(docs, tool.IndexOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExpertEpisode is one whole episode (question, searches, answer) through WithTools.
func BenchmarkExpertEpisode(b *testing.B) {
	e, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	seed := int64(0)
	for b.Loop() {
		if _, err := env.Play(context.Background(), e, NewExpert(seed, 0, nil), seed, 16); err != nil {
			b.Fatal(err)
		}
		seed++
	}
}
