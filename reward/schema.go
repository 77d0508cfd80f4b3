package reward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// JSONSchema grades a response that must be a JSON value valid against a JSON Schema (draft
// 2020-12 or draft-07; $ref only within the schema, nothing is fetched): 1 when it is, else 0.
// The value is the response's last fenced code block (```json or ```), or else the whole
// response, trimmed; anything but exactly one JSON value there scores 0.
type JSONSchema struct {
	resolved *jsonschema.Resolved
}

// CompileJSONSchema reads a schema (a JSON object, or true/false).
func CompileJSONSchema(schema string) (*JSONSchema, error) {
	var s jsonschema.Schema
	dec := json.NewDecoder(strings.NewReader(schema))
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("reward: json schema: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("reward: json schema: data after the schema")
	}
	r, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("reward: json schema: %w", err)
	}
	return &JSONSchema{resolved: r}, nil
}

var jsonFenceRE = regexp.MustCompile("(?s)```(?:json)?[ \t]*\r?\n(.*?)```")

// JSONOf returns the JSON text of a response: its last ```json (or bare ```) block, else the
// whole response, trimmed.
func JSONOf(response string) string {
	if m := jsonFenceRE.FindAllStringSubmatch(response, -1); len(m) > 0 {
		return strings.TrimSpace(m[len(m)-1][1])
	}
	return strings.TrimSpace(response)
}

// Score implements Scorer; s.Answer is not used (the schema is the answer).
func (j *JSONSchema) Score(_ context.Context, s Sample) (float64, error) {
	ok, _ := j.Check(s.Response)
	return b2f(ok), nil
}

// Check says whether the response's JSON is valid, and why not.
func (j *JSONSchema) Check(response string) (bool, string) {
	dec := json.NewDecoder(bytes.NewReader([]byte(JSONOf(response))))
	var v any
	if err := dec.Decode(&v); err != nil {
		return false, "not JSON: " + err.Error()
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, "data after the JSON value"
	}
	if err := j.resolved.Validate(v); err != nil {
		return false, err.Error()
	}
	return true, ""
}
