package code

import (
	"encoding/json"
	"strconv"
	"strings"
)

// pyRepr renders a task value (int, bool, string, []int, []string) as a Python literal, the way
// Python's repr would for the simple values the templates produce.
func pyRepr(v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return pyString(x)
	case []int:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = strconv.Itoa(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case []string:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyString(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	// Templates only produce the types above; anything else is a bug in a template, caught by
	// the tests that render every template's values.
	b, _ := json.Marshal(v)
	return string(b)
}

// pyString quotes s with single quotes as repr does for plain text; text with quotes,
// backslashes or control characters falls back to a JSON string, which Python also reads.
func pyString(s string) string {
	if !strings.ContainsAny(s, "'\\") && strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0 {
		return "'" + s + "'"
	}
	b, _ := json.Marshal(s)
	return string(b)
}
