package env

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentrl/agentrl/tool"
)

// DescribeTools renders the tool list for a system prompt: one line per tool,
// "name(arg, arg): description", then one line with the call syntax. It is deliberately terse:
// the built-in policy is a tiny model and every prompt token is paid for on every turn.
func DescribeTools(tools []tool.Tool) string {
	if len(tools) == 0 {
		return ""
	}
	var b strings.Builder
	for _, t := range tools {
		b.WriteString(t.Name())
		b.WriteByte('(')
		b.WriteString(strings.Join(argNames(t.Schema()), ", "))
		b.WriteString("): ")
		b.WriteString(strings.TrimSpace(t.Description()))
		b.WriteByte('\n')
	}
	b.WriteString(`Call: ` + tool.OpenTag + `{"name": ..., "arguments": {...}}` + tool.CloseTag)
	return b.String()
}

// argNames lists the keys of the schema's "properties" object in the order written (a map would
// lose it). A schema it cannot read yields no names: the description still stands.
func argNames(schema json.RawMessage) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(schema, &top) != nil {
		return nil
	}
	props, ok := top["properties"]
	if !ok {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(props))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var names []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return names
		}
		name, _ := tok.(string)
		names = append(names, name)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return names
		}
	}
	return names
}
