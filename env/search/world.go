package search

import (
	"fmt"
	"sync"

	"github.com/agentrl/agentrl/tool"
)

// world is what every instance shares read-only: the knowledge base, its documents and their
// index. It is built once, on first use, in a few tens of milliseconds.
type world struct {
	kb   *kb
	docs []tool.Doc
	ix   *tool.Index
}

var sharedWorld = sync.OnceValues(func() (*world, error) {
	k := buildKB()
	docs := make([]tool.Doc, len(k.ents))
	for i := range k.ents {
		docs[i] = tool.Doc{Title: k.ents[i].name, Text: k.doc(int32(i))}
	}
	ix, err := tool.NewIndex(docs, tool.IndexOptions{})
	if err != nil {
		return nil, fmt.Errorf("search: index the knowledge base: %w", err)
	}
	return &world{kb: k, docs: docs, ix: ix}, nil
})

// Documents returns the corpus the search tool indexes, one document per entity, in a fixed
// order. The slice is shared: do not modify it.
func Documents() ([]tool.Doc, error) {
	w, err := sharedWorld()
	if err != nil {
		return nil, err
	}
	return w.docs, nil
}
