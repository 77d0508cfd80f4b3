package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/agentrl/agentrl/tool"
)

// Template values are Go values of a few kinds, as Python's are in Jinja2: nil (None), bool,
// int64, float64, string, []any (list or tuple), *Map (dict, insertion-ordered), Undefined,
// *namespace, and callables.

// Map is a dict with string keys that keeps insertion order, as Python's does: the order tojson
// writes and loops visit.
type Map struct {
	keys []string
	vals map[string]any
}

// NewMap returns an empty Map.
func NewMap() *Map { return &Map{vals: map[string]any{}} }

// Set adds or replaces key, keeping the position of an existing key.
func (m *Map) Set(key string, v any) {
	if _, ok := m.vals[key]; !ok {
		m.keys = append(m.keys, key)
	}
	m.vals[key] = v
}

// Get returns the value of key.
func (m *Map) Get(key string) (any, bool) {
	v, ok := m.vals[key]
	return v, ok
}

// Keys returns the keys in insertion order.
func (m *Map) Keys() []string { return m.keys }

// Len is the number of keys.
func (m *Map) Len() int { return len(m.keys) }

// MarshalJSON writes the map as Python's json.dumps(..., separators=(",", ":")) would, in order.
func (m *Map) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	if err := writeJSON(&b, m, jsonOpts{itemSep: ",", keySep: ":"}, 0, 0); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// UnmarshalJSON reads a JSON object keeping its key order.
func (m *Map) UnmarshalJSON(data []byte) error {
	v, err := ParseJSON(data)
	if err != nil {
		return err
	}
	mm, ok := v.(*Map)
	if !ok {
		return errors.New("chat: not a JSON object")
	}
	*m = *mm
	return nil
}

// Undefined is a name or attribute that does not exist; it renders as "" and is false, and
// anything else done with it is an error, as with Jinja2's default Undefined.
type Undefined struct{ name string }

func undefinedValue(name string) Undefined { return Undefined{name} }

type namespace struct{ m *Map }

// callable is a global function, a bound method or a macro.
type callable func(st *state, args []any, kw *Map) (any, error)

const maxJSONDepth = 200

// ParseJSON decodes JSON into template values: objects become *Map in their order, integers
// int64 and other numbers float64.
func ParseJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSON(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("chat: trailing data after JSON value")
	}
	return v, nil
}

func decodeJSON(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("chat: JSON nested too deeply")
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := NewMap()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				m.Set(k.(string), v)
			}
			_, err := dec.Token()
			return m, err
		case '[':
			l := []any{}
			for dec.More() {
				v, err := decodeJSON(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l = append(l, v)
			}
			_, err := dec.Token()
			return l, err
		}
		return nil, fmt.Errorf("chat: unexpected %v in JSON", t)
	case json.Number:
		if n, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return n, nil
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil {
			return nil, fmt.Errorf("chat: number %s out of range", t)
		}
		return f, nil
	default:
		return t, nil // string, bool, nil
	}
}

// typeName names a value's kind as Python would, for error messages.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case *Map:
		return "dict"
	case Undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *loopInfo:
		return "LoopContext"
	case callable:
		return "function"
	}
	return fmt.Sprintf("%T", v)
}

func truthy(v any) bool {
	switch v := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case *Map:
		return v.Len() > 0
	}
	return true
}

// str is Python's str() of a value, as {{ }} prints it.
func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case Undefined:
		return ""
	}
	return repr(v)
}

// repr is Python's repr().
func repr(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case Undefined:
		return ""
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return pyFloat(v)
	case string:
		return pyStrRepr(v)
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = repr(x)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *Map:
		parts := make([]string, 0, v.Len())
		for _, k := range v.keys {
			parts = append(parts, pyStrRepr(k)+": "+repr(v.vals[k]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *namespace:
		return "<Namespace " + repr(v.m) + ">"
	}
	return "<function>"
}

func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	a := math.Abs(f)
	if a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

func pyStrRepr(s string) string {
	q := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, "\"") {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(q):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// jsonOpts are tojson's arguments: Python's json.dumps with transformers' defaults
// (ensure_ascii false, separators ", " and ": ", or "," and ": " with an indent).
type jsonOpts struct {
	indent      string
	hasIndent   bool
	itemSep     string
	keySep      string
	ensureASCII bool
	sortKeys    bool
}

func writeJSON(b *strings.Builder, v any, o jsonOpts, depth, guard int) error {
	if guard > maxJSONDepth {
		return errors.New("value nested too deeply for tojson")
	}
	newline := func(d int) {
		if o.hasIndent {
			b.WriteByte('\n')
			for range d {
				b.WriteString(o.indent)
			}
		}
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case Undefined:
		return fmt.Errorf("object of type Undefined is not JSON serializable ('%s' is undefined)", v.name)
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		switch {
		case math.IsInf(v, 1):
			b.WriteString("Infinity")
		case math.IsInf(v, -1):
			b.WriteString("-Infinity")
		case math.IsNaN(v):
			b.WriteString("NaN")
		default:
			b.WriteString(pyFloat(v))
		}
	case string:
		tool.WritePyJSONString(b, v, o.ensureASCII)
	case []any:
		if len(v) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			if err := writeJSON(b, x, o, depth+1, guard+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case *Map, *namespace:
		m, _ := v.(*Map)
		if ns, ok := v.(*namespace); ok {
			m = ns.m
		}
		if m.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := m.keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sortStrings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			tool.WritePyJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, m.vals[k], o, depth+1, guard+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
