package remote

import "encoding/json"

// schemaJSON is what GET /schema serves: JSON Schemas (draft 2020-12) of the values the protocol
// exchanges, so clients in other languages can validate both directions.
var schemaJSON = func() []byte {
	str := map[string]any{"oneOf": []any{
		map[string]any{"type": "string"},
		map[string]any{"type": "object", "required": []string{"b64"}, "additionalProperties": false,
			"properties":  map[string]any{"b64": map[string]any{"type": "string", "contentEncoding": "base64"}},
			"description": "bytes that are not valid UTF-8"},
	}}
	num := map[string]any{"oneOf": []any{
		map[string]any{"type": "number"},
		map[string]any{"enum": []string{"NaN", "+Inf", "-Inf"}},
		map[string]any{"type": "string", "pattern": "^NaN:0x[0-9a-f]{16}$"},
	}}
	obj := func(required []string, props map[string]any) map[string]any {
		return map[string]any{"type": "object", "required": required, "properties": props, "additionalProperties": false}
	}
	s := map[string]any{
		"$schema":  "https://json-schema.org/draft/2020-12/schema",
		"protocol": ProtocolVersion,
		"action":   map[string]any{"description": "the whole assistant turn, as text", "oneOf": str["oneOf"]},
		"reset_request": obj([]string{"seed"}, map[string]any{
			"seed":       map[string]any{"type": "integer"},
			"session_id": map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,128}$"},
		}),
		"observation": obj([]string{"system", "text"}, map[string]any{"system": str, "text": str}),
		"step_request": obj([]string{"session_id", "action"}, map[string]any{
			"session_id": map[string]any{"type": "string"}, "action": str,
		}),
		"transition": obj([]string{"session_id", "observation", "role", "reward", "done"}, map[string]any{
			"session_id":  map[string]any{"type": "string"},
			"observation": str,
			"role":        map[string]any{"enum": []string{"tool", "env"}},
			"reward":      num,
			"done":        map[string]any{"type": "boolean"},
			"tool_calls": map[string]any{"type": "array", "items": obj([]string{"name", "arguments"}, map[string]any{
				"name": str, "arguments": str, "result": str, "error": str,
			})},
			"info": map[string]any{"type": "object", "additionalProperties": str},
		}),
		"state": obj([]string{"session_id", "seed", "step_count", "done", "failed", "idle_ms"}, map[string]any{
			"session_id": map[string]any{"type": "string"}, "seed": map[string]any{"type": "integer"},
			"step_count": map[string]any{"type": "integer"}, "done": map[string]any{"type": "boolean"},
			"failed": map[string]any{"type": "boolean"}, "idle_ms": map[string]any{"type": "integer"},
		}),
		"error": obj([]string{"error"}, map[string]any{"error": obj([]string{"code", "message"}, map[string]any{
			"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"},
		})}),
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		panic(err) // a literal above is wrong: a programming error found by every test
	}
	return append(b, '\n')
}()
