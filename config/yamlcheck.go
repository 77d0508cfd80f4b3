package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Bounds on configuration input, checked before the YAML library sees it.
const (
	// MaxConfigBytes bounds a configuration file and each --set value: a run's configuration is
	// a few kilobytes.
	MaxConfigBytes = 1 << 20
	// MaxConfigDepth bounds how deeply YAML flow collections ([…] and {…}) nest: the YAML
	// library's memory grows with the square of that depth, and a configuration needs 3 or 4.
	MaxConfigDepth = 64
)

// readConfigFile reads at most MaxConfigBytes of the file at path: a larger file, a device
// (/dev/zero) or a pipe that does not end within the bound is an error, never read forever.
func readConfigFile(path string) ([]byte, error) {
	f, pipe, err := openConfigFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, pipeReadError(path, pipe, len(data), err)
	}
	if pipe && len(data) == 0 {
		return nil, fmt.Errorf("%s is a named pipe with no writer within %v (or one that wrote nothing): write the configuration into it, or give a file", path, configPipeWait)
	}
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("%s is larger than the %d-byte limit of a configuration (pipeline.MaxConfigBytes)", path, MaxConfigBytes)
	}
	return data, nil
}

// scanYAML refuses input over MaxConfigBytes, and flow collections nested deeper than
// MaxConfigDepth before the parser sees them, and returns the tokens (lexing is linear).
func scanYAML(data []byte) (token.Tokens, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("the configuration is %d bytes, over the limit of %d (pipeline.MaxConfigBytes)", len(data), MaxConfigBytes)
	}
	toks := lexer.Tokenize(string(data))
	depth := 0
	for _, t := range toks {
		switch t.Type {
		case token.SequenceStartType, token.MappingStartType:
			if depth++; depth > MaxConfigDepth {
				return nil, fmt.Errorf("line %d: lists and maps nest more than %d deep (pipeline.MaxConfigDepth)", t.Position.Line, MaxConfigDepth)
			}
		case token.SequenceEndType, token.MappingEndType:
			depth = max(depth-1, 0)
		}
	}
	return toks, nil
}

// errEmptyConfig is what an empty (or comments-only) configuration gives.
var errEmptyConfig = errors.New("the configuration is empty: start from `agentrl config show` (the calc preset) and edit it, or use --preset")

// decodeYAML decodes data strictly into c (unknown keys are errors with line, column and a
// snippet) after the checks of scanYAML, and refuses a number with a fraction (or an infinity
// or NaN) where the setting is an integer, naming its key path ("phases[1].steps"): the YAML
// library would cut `steps: 1.5` to 1 silently. An empty document is errEmptyConfig.
func decodeYAML(data []byte, c *Config) error {
	toks, err := scanYAML(data)
	if err != nil {
		return err
	}
	f, err := parser.Parse(toks, 0)
	if err != nil {
		return err
	}
	var body ast.Node
	for _, d := range f.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if _, ok := d.Body.(*ast.CommentGroupNode); ok {
			continue
		}
		body = d.Body
		break
	}
	if body == nil {
		return errEmptyConfig
	}
	w := intWalker{anchors: map[string]ast.Node{}}
	if err := w.walk(body, reflect.TypeFor[Config](), ""); err != nil {
		return err
	}
	return yaml.NodeToValue(body, c, yaml.Strict())
}

type intWalker struct {
	anchors map[string]ast.Node
}

func (w *intWalker) walk(n ast.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch v := n.(type) {
	case nil:
		return nil
	case *ast.AnchorNode:
		if v.Name != nil {
			w.anchors[v.Name.GetToken().Value] = v.Value
		}
		return w.walk(v.Value, t, path)
	case *ast.TagNode:
		return w.walk(v.Value, t, path)
	case *ast.AliasNode:
		// Only a scalar is followed: the anchored collection was checked where it stands, and
		// following collections through aliases could take exponential time.
		if v.Value == nil {
			return nil
		}
		switch target := w.anchors[v.Value.GetToken().Value].(type) {
		case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
			return w.walk(target, t, path)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		fields := yamlFields(t)
		for _, mv := range mappingValues(n) {
			if mv.Key == nil || mv.Key.GetToken() == nil {
				continue
			}
			key := mv.Key.GetToken().Value
			if ft, ok := fields[key]; ok {
				if err := w.walk(mv.Value, ft, join(path, key)); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		for _, mv := range mappingValues(n) {
			if mv.Key == nil || mv.Key.GetToken() == nil {
				continue
			}
			if err := w.walk(mv.Value, t.Elem(), join(path, mv.Key.GetToken().Value)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if s, ok := n.(*ast.SequenceNode); ok {
			for i, el := range s.Values {
				if err := w.walk(el, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		switch s := n.(type) {
		case *ast.FloatNode:
			if s.Value != math.Trunc(s.Value) || math.IsInf(s.Value, 0) {
				return fmt.Errorf("%s: %s is not an integer", path, s.GetToken().Value)
			}
		case *ast.InfinityNode, *ast.NanNode:
			return fmt.Errorf("%s: %s is not an integer", path, n.GetToken().Value)
		}
		return checkIntRange(n, t, path)
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mappingValues lists the key/value pairs of a mapping node (a one-pair mapping is a bare
// MappingValueNode in the parser's tree).
func mappingValues(n ast.Node) []*ast.MappingValueNode {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}
	}
	return nil
}

// yamlFields maps the YAML keys of struct type t to their field types, with inline and
// embedded structs' keys flattened in as the decoder does.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if strings.Contains(","+opts+",", ",inline,") || (f.Anonymous && name == "") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}
