package chat

import (
	"testing"
)

// BenchmarkRender renders the tool conversation of the peer test (system, tools, two tool calls
// and responses, eight messages) with each family's template, with the generation prompt.
func BenchmarkRender(b *testing.B) {
	for _, f := range realFamilies(b) {
		tpl, ctx := benchTemplate(b, f)
		if _, err := tpl.Render(ctx); err != nil && f.name != "llama2" && f.name != "mistral_tools" && f.name != "llama3_1_tools" && f.name != "gemma" {
			b.Fatalf("%s: %v", f.name, err)
		}
		b.Run(f.name, func(b *testing.B) {
			for b.Loop() {
				_, _ = tpl.Render(ctx)
			}
		})
	}
}

// BenchmarkParse parses Qwen3's template.
func BenchmarkParse(b *testing.B) {
	src := realFamilies(b)[0].source
	for b.Loop() {
		if _, err := Parse(src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderVsPeer times each family's render of the tool conversation here and in
// @huggingface/jinja (node, 2000 renders after a warm-up render) in one run, and reports the
// peer's time over ours.
func BenchmarkRenderVsPeer(b *testing.B) {
	conv := peerConversations()[3]
	fams := realFamilies(b)
	var cases []peerCase
	ctxs := make([]*Map, len(fams))
	tpls := make([]*Template, len(fams))
	for i, f := range fams {
		tpl, ctx := benchTemplate(b, f)
		tpls[i], ctxs[i] = tpl, ctx
		peerCtx, _ := Context(conv.msgs, conv.tools, true)
		for k, v := range f.specials {
			peerCtx.Set(k, v)
		}
		js, _ := peerCtx.MarshalJSON()
		cases = append(cases, peerCase{Template: f.source, Context: js})
	}
	peer := runJinjaPeerRepeat(b, cases, 2000)
	for i, f := range fams {
		b.Run(f.name, func(b *testing.B) {
			for b.Loop() {
				_, _ = tpls[i].Render(ctxs[i])
			}
			ours := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if peer[i].Out != nil && ours > 0 {
				b.ReportMetric(peer[i].Ns, "peer-ns/op")
				b.ReportMetric(peer[i].Ns/ours, "peer/ours")
			}
		})
	}
}

// benchTemplate is family f's template, parsed, and the context of the peer test's tool
// conversation with the generation prompt, which the render benchmarks time.
func benchTemplate(b *testing.B, f family) (*Template, *Map) {
	b.Helper()
	tpl, err := Parse(f.source)
	if err != nil {
		b.Fatal(err)
	}
	tpl.specials = f.specials
	conv := peerConversations()[3]
	ctx, err := Context(conv.msgs, conv.tools, true)
	if err != nil {
		b.Fatal(err)
	}
	return tpl, ctx
}
