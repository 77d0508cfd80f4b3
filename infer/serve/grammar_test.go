package serve

import (
	"encoding/json"
	"strings"
	"testing"
)

// accepts reports whether the grammar from start reads text whole and may stop after it.
func accepts(start *frame, text string) bool {
	f, ok := feedText(start, text)
	if !ok {
		return false
	}
	_, ok = step(f, end)
	return ok
}

func TestSchemaGrammar(t *testing.T) {
	schema := `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"unit":{"enum":["c","f"]},
		"tags":{"type":"array","items":{"type":"string"}},"ok":{"type":["boolean","null"]},"x":{"type":"number"}},"required":["city","days"],"additionalProperties":false}`
	n, err := compileSchema(json.RawMessage(schema), "response_format")
	if err != nil {
		t.Fatal(err)
	}
	start := valueFrame(n, nil)
	for _, c := range []struct {
		text string
		ok   bool
	}{
		{`{"city":"Paris","days":3}`, true},
		{`{"city":"Pa\"ris \u00e9 é","days":-30,"unit":"f","tags":["a","b"],"ok":null,"x":1.5e-3}`, true},
		{`{"city":"Paris","days":3,"tags":[],"x":0}`, true},
		{`{"city":"Paris","days":3,"ok":true}`, true},
		{`{"days":3,"city":"Paris"}`, false},   // the schema's order
		{`{"city":"Paris"}`, false},            // days is required
		{`{"city":"Paris","days":3.5}`, false}, // an integer
		{`{"city":"Paris","days":03}`, false},  // no leading zero
		{`{"city":"Paris","days":3,"unit":"k"}`, false},
		{`{"city":"Paris","days":3,"zip":1}`, false}, // no other property
		{`{"city":"Paris","days":3,}`, false},
		{`{"city": "Paris","days":3}`, false}, // compact
		{`{"city":"Paris","days":3}x`, false},
		{`{"city":"a` + "\n" + `","days":3}`, false},
		{`{"city":"Paris","days":3,"ok":1}`, false},
		{`{"city":"Paris","days":3`, false},
	} {
		if got := accepts(start, c.text); got != c.ok {
			t.Errorf("%s: accepted %v, want %v", c.text, got, c.ok)
		}
	}
	// Enums of numbers that prefix one another, and a free object.
	n, _ = compileSchema(json.RawMessage(`{"enum":[1,10,100]}`), "p")
	for text, ok := range map[string]bool{"1": true, "10": true, "100": true, "1000": false, "2": false} {
		if accepts(valueFrame(n, nil), text) != ok {
			t.Errorf("enum: %s", text)
		}
	}
	obj := valueFrame(&schemaNode{types: tObject}, nil)
	for text, ok := range map[string]bool{`{}`: true, `{"a":[1,{"b":null}],"c":"d"}`: true, `[1]`: false, `{"a"}`: false, `{"a":1,}`: false} {
		if accepts(obj, text) != ok {
			t.Errorf("json_object: %s", text)
		}
	}
	// Unsupported keywords are refused by name.
	for _, bad := range []string{`{"type":"string","pattern":"a+"}`, `{"anyOf":[{"type":"string"}]}`, `{"$ref":"#/x"}`, `{"type":"strin"}`,
		`{"type":"object","properties":{"a":{"minLength":2}}}`, `{"type":"object","required":["a"]}`, `[1]`} {
		_, err := compileSchema(json.RawMessage(bad), "response_format")
		if err == nil {
			t.Errorf("%s compiled", bad)
		}
	}
	_, err = compileSchema(json.RawMessage(`{"type":"string","pattern":"a+"}`), "response_format")
	if err == nil || !strings.Contains(err.Error(), `"pattern"`) {
		t.Errorf("pattern: %v", err)
	}
}

// Whatever a grammar accepts is valid JSON of the schema; no input panics the compiler or the
// automaton.
func FuzzSchemaGrammar(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"number"}}},"required":["a"]}`, `{"a":"x","b":[1,2.5]}`)
	f.Add(`{"enum":["x",1,null,{"k":[true]}]}`, `{"k":[true]}`)
	f.Add(`{}`, `{"a":[{},[],"\u0041",-0.5E+3]}`)
	f.Add(`{"type":["integer","string"]}`, `"é\\n"`)
	f.Fuzz(func(t *testing.T, schema, text string) {
		n, err := compileSchema(json.RawMessage(schema), "p")
		if err != nil {
			return
		}
		if accepts(valueFrame(n, nil), text) {
			var v any
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				t.Fatalf("schema %s accepted %q: %v", schema, text, err)
			}
		}
	})
}
