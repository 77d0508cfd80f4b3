package reward

import (
	"context"
	"strings"
	"testing"
)

func TestJSONSchema(t *testing.T) {
	schema := `{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}, "required": ["name", "age"], "additionalProperties": false}`
	j, err := CompileJSONSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		response string
		want     float64
	}{
		{`{"name": "Ada", "age": 36}`, 1},
		{"Here it is:\n```json\n{\"name\": \"Ada\", \"age\": 36}\n```", 1},
		{"draft:\n```json\n{\"name\": 1}\n```\nfinal:\n```\n{\"age\": 3, \"name\": \"B\"}\n```", 1},
		{`{"name": "Ada"}`, 0},                      // a required property missing
		{`{"name": "Ada", "age": -1}`, 0},           // below the minimum
		{`{"name": "Ada", "age": 3.5}`, 0},          // not an integer
		{`{"name": "Ada", "age": 3, "x": true}`, 0}, // additional property
		{`{"name": "Ada", "age": 3} {}`, 0},         // two values
		{`name: Ada`, 0},                            // not JSON
		{``, 0},
	} {
		got, err := j.Score(context.Background(), Sample{Response: c.response})
		if err != nil || got != c.want {
			t.Errorf("%q: %v %v, want %v", c.response, got, err, c.want)
		}
	}
	if ok, why := j.Check(`{"name": "Ada"}`); ok || !strings.Contains(why, "age") {
		t.Errorf("the reason names the missing property: %q", why)
	}
	for _, bad := range []string{`{"type": 3}`, `{"type": "object"`, `[1]`, `{"$ref": "http://example.com/s.json"}`, `{} {}`} {
		if _, err := CompileJSONSchema(bad); err == nil {
			t.Errorf("schema %s compiled", bad)
		}
	}
}
