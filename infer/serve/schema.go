package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// A JSON schema subset, compiled for constrained decoding: the completion is held to compact
// JSON text (no whitespace between tokens) that the schema accepts, objects writing their
// properties in the schema's order.
//
// Supported: type (a name or a list of names: object, array, string, number, integer, boolean,
// null), properties, required, items, enum, const, additionalProperties (no property beyond
// those listed is ever written, whatever it says), and the annotations title, description,
// default, examples, $schema and $comment. Every other keyword is refused by name, since
// ignoring it would let through text the schema forbids.

// schemaNode is a compiled schema.
type schemaNode struct {
	types uint8        // allowed JSON types (typeAny: every type)
	props []schemaProp // object properties, in the order written
	fixed bool         // properties was given: only those are written (else any members)
	items *schemaNode  // array items (nil: any value)
	enum  []string     // allowed values as compact JSON (enum or const); nil: no such restriction
}

type schemaProp struct {
	key      string // the property name as a JSON string literal followed by ':'
	schema   *schemaNode
	required bool
}

const (
	tObject uint8 = 1 << iota
	tArray
	tString
	tNumber
	tInteger
	tBool
	tNull
	typeAny = tObject | tArray | tString | tNumber | tInteger | tBool | tNull
)

var typeNames = map[string]uint8{"object": tObject, "array": tArray, "string": tString, "number": tNumber | tInteger,
	"integer": tInteger, "boolean": tBool, "null": tNull}

// Schema bounds: a schema is client input.
const (
	maxSchemaDepth = 32
	maxSchemaNodes = 4096
	maxEnum        = 256
)

var annotations = map[string]bool{"title": true, "description": true, "default": true, "examples": true, "$schema": true, "$comment": true}

type schemaCompiler struct {
	nodes int
	param string
}

// compileSchema compiles raw (a JSON schema object); param names the request field in errors.
func compileSchema(raw json.RawMessage, param string) (*schemaNode, error) {
	c := &schemaCompiler{param: param}
	return c.compile(raw, "", 0)
}

func (c *schemaCompiler) fail(path, format string, args ...any) error {
	where := "the schema"
	if path != "" {
		where = "the schema at " + path
	}
	return unsupported(c.param, "%s: %s", where, fmt.Sprintf(format, args...))
}

func (c *schemaCompiler) compile(raw json.RawMessage, path string, depth int) (*schemaNode, error) {
	if c.nodes++; c.nodes > maxSchemaNodes {
		return nil, c.fail(path, "more than %d schemas", maxSchemaNodes)
	}
	if depth > maxSchemaDepth {
		return nil, c.fail(path, "nested deeper than %d", maxSchemaDepth)
	}
	keys, fields, err := orderedObject(raw)
	if err != nil {
		if t := bytes.TrimSpace(raw); string(t) == "true" {
			return &schemaNode{types: typeAny}, nil
		}
		return nil, c.fail(path, "must be a JSON object")
	}
	n := &schemaNode{types: typeAny}
	var required []string
	var propKeys []string
	var propRaw map[string]json.RawMessage
	for _, k := range keys {
		v := fields[k]
		switch {
		case annotations[k]:
		case k == "type":
			var one string
			var many []string
			if json.Unmarshal(v, &one) == nil {
				many = []string{one}
			} else if json.Unmarshal(v, &many) != nil || len(many) == 0 {
				return nil, c.fail(path, "type must be a type name or a list of them")
			}
			n.types = 0
			for _, name := range many {
				bit, ok := typeNames[name]
				if !ok {
					return nil, c.fail(path, "unknown type %q", name)
				}
				n.types |= bit
			}
		case k == "properties":
			if propKeys, propRaw, err = orderedObject(v); err != nil {
				return nil, c.fail(path, "properties must be an object")
			}
			n.fixed = true
		case k == "required":
			if json.Unmarshal(v, &required) != nil {
				return nil, c.fail(path, "required must be a list of names")
			}
		case k == "items":
			if n.items, err = c.compile(v, path+"/items", depth+1); err != nil {
				return nil, err
			}
		case k == "additionalProperties":
			// Only the listed properties are ever written: valid whatever this allows.
		case k == "enum" || k == "const":
			var vals []json.RawMessage
			if k == "const" {
				vals = []json.RawMessage{v}
			} else if json.Unmarshal(v, &vals) != nil || len(vals) == 0 || len(vals) > maxEnum {
				return nil, c.fail(path, "enum must be a list of 1 to %d values", maxEnum)
			}
			n.enum = nil
			for _, val := range vals {
				lit, err := compactJSON(val)
				if err != nil {
					return nil, c.fail(path, "%s holds invalid JSON", k)
				}
				if !slices.Contains(n.enum, lit) {
					n.enum = append(n.enum, lit)
				}
			}
		default:
			return nil, c.fail(path, "the keyword %q is not supported (supported: type, properties, required, items, enum, const, additionalProperties and annotations)", k)
		}
	}
	if n.enum != nil {
		// The enum decides; a value of another type than the schema's is the client's
		// contradiction, refused.
		for _, lit := range n.enum {
			if n.types&valueType(lit) == 0 {
				return nil, c.fail(path, "enum value %s is not of the schema's type", lit)
			}
		}
		return n, nil
	}
	for _, name := range required {
		if _, ok := propRaw[name]; !ok {
			return nil, c.fail(path, "required property %q is not among the properties", name)
		}
	}
	for _, k := range propKeys {
		sub, err := c.compile(propRaw[k], path+"/properties/"+k, depth+1)
		if err != nil {
			return nil, err
		}
		key, _ := compactJSON(mustMarshal(k))
		n.props = append(n.props, schemaProp{key: key + ":", schema: sub, required: slices.Contains(required, k)})
	}
	return n, nil
}

// valueType is the type bit of a compact JSON value.
func valueType(lit string) uint8 {
	switch lit[0] {
	case '{':
		return tObject
	case '[':
		return tArray
	case '"':
		return tString
	case 't', 'f':
		return tBool
	case 'n':
		return tNull
	}
	if strings.ContainsAny(lit, ".eE") {
		return tNumber
	}
	return tInteger | tNumber
}

func mustMarshal(s string) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return bytes.TrimSpace(b.Bytes())
}

// compactJSON is raw in compact form, strings without HTML escaping (as the model writes them).
func compactJSON(raw json.RawMessage) (string, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	if dec.More() {
		return "", fmt.Errorf("data after the value")
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSpace(out.String()), nil
}

// orderedObject reads a JSON object's keys in the order written, and its fields.
func orderedObject(raw json.RawMessage) ([]string, map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, nil, fmt.Errorf("not an object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, _ := t.(string)
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, nil, err
		}
	}
	return keys, fields, nil
}
