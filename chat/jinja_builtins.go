package chat

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// The filters, tests, methods and globals the engine implements: those the chat templates of
// the model families in use call, with Jinja2's (and Python's) meaning.

type filterFunc func(st *state, v any, args []any, kw *Map) (any, error)

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"trim": func(_ *state, v any, args []any, _ *Map) (any, error) {
			s, err := wantString(v)
			if err != nil {
				return nil, err
			}
			if len(args) > 0 {
				chars, _ := args[0].(string)
				return strings.Trim(s, chars), nil
			}
			return strings.TrimFunc(s, unicode.IsSpace), nil
		},
		"tojson": filterToJSON,
		"length": filterLength,
		"count":  filterLength,
		"first": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			l, err := iterate(v, 0)
			if err != nil {
				return nil, err
			}
			if len(l) == 0 {
				return undefinedValue("first"), nil
			}
			return l[0], nil
		},
		"last": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			l, err := iterate(v, 0)
			if err != nil {
				return nil, err
			}
			if len(l) == 0 {
				return undefinedValue("last"), nil
			}
			return l[len(l)-1], nil
		},
		"default": filterDefault,
		"d":       filterDefault,
		"items": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			if _, ok := v.(Undefined); ok {
				return []any{}, nil
			}
			m, ok := v.(*Map)
			if !ok {
				return nil, fmt.Errorf("can only get items from a mapping, not %s", typeName(v))
			}
			return mapItems(m), nil
		},
		"string": func(_ *state, v any, _ []any, _ *Map) (any, error) { return str(v), nil },
		"lower": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			return strings.ToLower(str(v)), nil
		},
		"upper": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			return strings.ToUpper(str(v)), nil
		},
		"capitalize": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			rs := []rune(strings.ToLower(str(v)))
			if len(rs) > 0 {
				rs[0] = unicode.ToUpper(rs[0])
			}
			return string(rs), nil
		},
		"join": func(_ *state, v any, args []any, kw *Map) (any, error) {
			l, err := iterate(v, 0)
			if err != nil {
				return nil, err
			}
			sep := ""
			if len(args) > 0 {
				sep = str(args[0])
			}
			parts := make([]string, len(l))
			for i, x := range l {
				parts[i] = str(x)
			}
			return strings.Join(parts, sep), nil
		},
		"list": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			l, err := iterate(v, 0)
			return append([]any{}, l...), err
		},
		"reverse": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			if s, ok := v.(string); ok {
				rs := []rune(s)
				slices.Reverse(rs)
				return string(rs), nil
			}
			l, err := iterate(v, 0)
			l = append([]any{}, l...)
			slices.Reverse(l)
			return l, err
		},
		"replace": func(_ *state, v any, args []any, _ *Map) (any, error) {
			if len(args) < 2 {
				return nil, errors.New("replace needs two arguments")
			}
			return strings.ReplaceAll(str(v), str(args[0]), str(args[1])), nil
		},
		"safe":   func(_ *state, v any, _ []any, _ *Map) (any, error) { return v, nil },
		"int":    filterInt,
		"float":  filterFloat,
		"abs":    filterAbs,
		"map":    filterMap,
		"select": func(st *state, v any, a []any, kw *Map) (any, error) { return selectItems(st, v, a, false, false) },
		"reject": func(st *state, v any, a []any, kw *Map) (any, error) { return selectItems(st, v, a, false, true) },
		"selectattr": func(st *state, v any, a []any, kw *Map) (any, error) {
			return selectItems(st, v, a, true, false)
		},
		"rejectattr": func(st *state, v any, a []any, kw *Map) (any, error) {
			return selectItems(st, v, a, true, true)
		},
		"unique": func(_ *state, v any, _ []any, _ *Map) (any, error) {
			l, err := iterate(v, 0)
			var out []any
			for _, x := range l {
				dup := false
				for _, y := range out {
					if equal(x, y) {
						dup = true
						break
					}
				}
				if !dup {
					out = append(out, x)
				}
			}
			return out, err
		},
		"indent": filterIndent,
		"title":  filterTitle,
		"escape": filterEscape,
		"e":      filterEscape,
		"sum": func(_ *state, v any, args []any, kw *Map) (any, error) {
			l, err := iterate(v, 0)
			if err != nil {
				return nil, err
			}
			var total any = int64(0)
			var attr any
			if len(args) > 0 {
				attr = args[0]
			}
			if len(args) > 1 {
				total = args[1]
			}
			if kw != nil {
				if x, ok := kw.Get("start"); ok {
					total = x
				}
				if x, ok := kw.Get("attribute"); ok {
					attr = x
				}
			}
			for _, x := range l {
				if attr != nil {
					if x, err = getAttr(x, str(attr), 0); err != nil {
						return nil, err
					}
				}
				if total, err = arith("+", total, x); err != nil {
					return nil, err
				}
			}
			return total, nil
		},
		"sort": filterSort,
		"min":  func(st *state, v any, a []any, kw *Map) (any, error) { return extreme(v, -1) },
		"max":  func(st *state, v any, a []any, kw *Map) (any, error) { return extreme(v, 1) },
		"round": func(_ *state, v any, args []any, _ *Map) (any, error) {
			if n, ok := asInt(v); ok { // Python's round of an int is that int
				return n, nil
			}
			f, ok := asFloat(v)
			if !ok {
				return nil, fmt.Errorf("round needs a number, not %s", typeName(v))
			}
			prec := int64(0)
			if len(args) > 0 {
				prec, _ = asInt(args[0])
			}
			if prec < 0 || prec > 15 {
				return nil, fmt.Errorf("round precision %d out of range", prec)
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return f, nil
			}
			// Python's round: the exact binary value rounded half to even, as Go formats it.
			r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64)
			return r, err
		},
	}
}

// filterTitle is Jinja2's title (not str.title): each word, split at runs of whitespace and
// "-({[<", gets its first character upper-cased and the rest lower-cased.
func filterTitle(_ *state, v any, _ []any, _ *Map) (any, error) {
	isSep := func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune("-({[<", r) }
	var b strings.Builder
	first := true
	for _, r := range str(v) {
		switch {
		case isSep(r):
			b.WriteRune(r)
			first = true
		case first:
			b.WriteString(strings.ToUpper(string(r)))
			first = false
		default:
			b.WriteString(strings.ToLower(string(r)))
		}
	}
	return b.String(), nil
}

// filterEscape is Jinja2's escape (markupsafe): & < > ' " as HTML entities.
func filterEscape(_ *state, v any, _ []any, _ *Map) (any, error) {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", "\"", "&#34;").Replace(str(v)), nil
}

// filterSort is Jinja2's sort(reverse=false, case_sensitive=false, attribute=none).
func filterSort(_ *state, v any, args []any, kw *Map) (any, error) {
	l, err := iterate(v, 0)
	if err != nil {
		return nil, err
	}
	reverse, caseSensitive := len(args) > 0 && truthy(args[0]), len(args) > 1 && truthy(args[1])
	var attr any
	if len(args) > 2 {
		attr = args[2]
	}
	if kw != nil {
		if x, ok := kw.Get("reverse"); ok {
			reverse = truthy(x)
		}
		if x, ok := kw.Get("case_sensitive"); ok {
			caseSensitive = truthy(x)
		}
		if x, ok := kw.Get("attribute"); ok {
			attr = x
		}
	}
	key := func(x any) (any, error) {
		if attr != nil {
			var err error
			if x, err = getAttr(x, str(attr), 0); err != nil {
				return nil, err
			}
		}
		if s, ok := x.(string); ok && !caseSensitive {
			return strings.ToLower(s), nil
		}
		return x, nil
	}
	out := append([]any{}, l...)
	keys := make([]any, len(out))
	for i, x := range out {
		if keys[i], err = key(x); err != nil {
			return nil, err
		}
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	slices.SortStableFunc(idx, func(a, b int) int {
		c, err := compare(keys[a], keys[b])
		if err != nil && cmpErr == nil {
			cmpErr = fmt.Errorf("'<' not supported between %s and %s", typeName(keys[a]), typeName(keys[b]))
		}
		if reverse {
			return -c
		}
		return c
	})
	if cmpErr != nil {
		return nil, cmpErr
	}
	sorted := make([]any, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted, nil
}

// extreme is min (dir -1) or max (dir 1) of a sequence, strings compared without case.
func extreme(v any, dir int) (any, error) {
	l, err := iterate(v, 0)
	if err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return undefinedValue("no items"), nil
	}
	best := l[0]
	for _, x := range l[1:] {
		a, b := x, best
		if s, ok := a.(string); ok {
			a = strings.ToLower(s)
		}
		if s, ok := b.(string); ok {
			b = strings.ToLower(s)
		}
		c, err := compare(a, b)
		if err != nil {
			return nil, fmt.Errorf("'<' not supported between %s and %s", typeName(x), typeName(best))
		}
		if c*dir > 0 {
			best = x
		}
	}
	return best, nil
}

func wantString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case Undefined:
		return "", nil
	}
	return str(v), nil
}

func mapItems(m *Map) []any {
	l := make([]any, len(m.keys))
	for i, k := range m.keys {
		l[i] = []any{k, m.vals[k]}
	}
	return l
}

func filterLength(_ *state, v any, _ []any, _ *Map) (any, error) {
	switch v := v.(type) {
	case string:
		return int64(len([]rune(v))), nil
	case []any:
		return int64(len(v)), nil
	case *Map:
		return int64(v.Len()), nil
	case Undefined:
		return int64(0), nil
	}
	return nil, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

func filterDefault(_ *state, v any, args []any, kw *Map) (any, error) {
	def := any("")
	if len(args) > 0 {
		def = args[0]
	}
	boolean := len(args) > 1 && truthy(args[1])
	if kw != nil {
		if b, ok := kw.Get("boolean"); ok {
			boolean = truthy(b)
		}
		if d, ok := kw.Get("default_value"); ok {
			def = d
		}
	}
	if _, ok := v.(Undefined); ok || (boolean && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func filterToJSON(_ *state, v any, args []any, kw *Map) (any, error) {
	o := jsonOpts{itemSep: ", ", keySep: ": "}
	get := func(name string, pos int) (any, bool) {
		if kw != nil {
			if x, ok := kw.Get(name); ok {
				return x, true
			}
		}
		if pos < len(args) {
			return args[pos], true
		}
		return nil, false
	}
	if x, ok := get("ensure_ascii", 0); ok {
		o.ensureASCII = truthy(x)
	}
	if x, ok := get("indent", 1); ok && x != nil {
		switch x := x.(type) {
		case int64:
			if x < 0 || x > 64 {
				return nil, fmt.Errorf("indent %d out of range", x)
			}
			o.indent = strings.Repeat(" ", int(x))
		case string:
			o.indent = x
		default:
			return nil, fmt.Errorf("indent must be an integer or a string, not %s", typeName(x))
		}
		o.hasIndent = true
		o.itemSep = ","
	}
	if x, ok := get("separators", 2); ok && x != nil {
		l, ok := x.([]any)
		if !ok || len(l) != 2 {
			return nil, errors.New("separators must be a pair of strings")
		}
		o.itemSep, o.keySep = str(l[0]), str(l[1])
	}
	if x, ok := get("sort_keys", 3); ok {
		o.sortKeys = truthy(x)
	}
	var b strings.Builder
	if err := writeJSON(&b, v, o, 0, 0); err != nil {
		return nil, err
	}
	return b.String(), nil
}

func filterInt(_ *state, v any, args []any, _ *Map) (any, error) {
	switch v := v.(type) {
	case Undefined:
		return nil, fmt.Errorf("'%s' is undefined", v.name)
	case int64:
		return v, nil
	case float64:
		return int64(v), nil
	case bool:
		return b2i(v), nil
	case string:
		var n int64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d", &n); err == nil {
			return n, nil
		}
	}
	if len(args) > 0 {
		return args[0], nil
	}
	return int64(0), nil
}

func filterFloat(_ *state, v any, args []any, _ *Map) (any, error) {
	if u, ok := v.(Undefined); ok {
		return nil, fmt.Errorf("'%s' is undefined", u.name)
	}
	if f, ok := asFloat(v); ok {
		return f, nil
	}
	if s, ok := v.(string); ok {
		var f float64
		if _, err := fmt.Sscanf(strings.TrimSpace(s), "%g", &f); err == nil {
			return f, nil
		}
	}
	if len(args) > 0 {
		return args[0], nil
	}
	return 0.0, nil
}

func filterAbs(_ *state, v any, _ []any, _ *Map) (any, error) {
	switch v := v.(type) {
	case bool:
		return b2i(v), nil
	case int64:
		if v < 0 {
			return -v, nil
		}
		return v, nil
	case float64:
		if v < 0 {
			return -v, nil
		}
		return v, nil
	}
	return nil, fmt.Errorf("bad operand type for abs(): %s", typeName(v))
}

func filterIndent(_ *state, v any, args []any, kw *Map) (any, error) {
	width := "    "
	first, blank := false, false
	if len(args) > 0 {
		switch w := args[0].(type) {
		case int64:
			if w < 0 || w > 256 {
				return nil, fmt.Errorf("indent width %d out of range", w)
			}
			width = strings.Repeat(" ", int(w))
		case string:
			width = w
		}
	}
	if len(args) > 1 {
		first = truthy(args[1])
	}
	if len(args) > 2 {
		blank = truthy(args[2])
	}
	if kw != nil {
		if x, ok := kw.Get("width"); ok {
			if n, ok := x.(int64); ok && n >= 0 && n <= 256 {
				width = strings.Repeat(" ", int(n))
			} else if s, ok := x.(string); ok {
				width = s
			}
		}
		if x, ok := kw.Get("first"); ok {
			first = truthy(x)
		}
		if x, ok := kw.Get("blank"); ok {
			blank = truthy(x)
		}
	}
	lines := strings.Split(str(v), "\n")
	for i := range lines {
		if i == 0 && !first {
			continue
		}
		if lines[i] == "" && !blank {
			continue
		}
		lines[i] = width + lines[i]
	}
	return strings.Join(lines, "\n"), nil
}

func filterMap(st *state, v any, args []any, kw *Map) (any, error) {
	l, err := iterate(v, 0)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(l))
	if kw != nil {
		if a, ok := kw.Get("attribute"); ok {
			def, hasDef := kw.Get("default")
			for _, x := range l {
				y, err := getAttr(x, str(a), 0)
				if err != nil {
					return nil, err
				}
				if _, u := y.(Undefined); u && hasDef {
					y = def
				}
				out = append(out, y)
			}
			return out, nil
		}
	}
	if len(args) == 0 {
		return nil, errors.New("map needs a filter name or attribute=")
	}
	name := str(args[0])
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("no filter named %q", name)
	}
	for _, x := range l {
		y, err := f(st, x, args[1:], nil)
		if err != nil {
			return nil, err
		}
		out = append(out, y)
	}
	return out, nil
}

func selectItems(_ *state, v any, args []any, attr, reject bool) (any, error) {
	l, err := iterate(v, 0)
	if err != nil {
		return nil, err
	}
	var out []any
	for _, x := range l {
		subj := x
		rest := args
		if attr {
			if len(args) == 0 {
				return nil, errors.New("missing attribute name")
			}
			if subj, err = getAttr(x, str(args[0]), 0); err != nil {
				return nil, err
			}
			rest = args[1:]
		}
		ok := truthy(subj)
		if len(rest) > 0 {
			name := str(rest[0])
			t, found := tests[name]
			if !found {
				return nil, fmt.Errorf("no test named %q", name)
			}
			if ok, err = t(subj, rest[1:]); err != nil {
				return nil, err
			}
		}
		if ok != reject {
			out = append(out, x)
		}
	}
	if out == nil {
		out = []any{}
	}
	return out, nil
}

type testFunc func(v any, args []any) (bool, error)

var tests = map[string]testFunc{
	"defined":   func(v any, _ []any) (bool, error) { _, u := v.(Undefined); return !u, nil },
	"undefined": func(v any, _ []any) (bool, error) { _, u := v.(Undefined); return u, nil },
	"none":      func(v any, _ []any) (bool, error) { return v == nil, nil },
	"string":    func(v any, _ []any) (bool, error) { _, ok := v.(string); return ok, nil },
	"number": func(v any, _ []any) (bool, error) {
		switch v.(type) {
		case int64, float64, bool: // Python's bool is a Number
			return true, nil
		}
		return false, nil
	},
	"integer":  func(v any, _ []any) (bool, error) { _, ok := v.(int64); return ok, nil },
	"float":    func(v any, _ []any) (bool, error) { _, ok := v.(float64); return ok, nil },
	"boolean":  func(v any, _ []any) (bool, error) { _, ok := v.(bool); return ok, nil },
	"true":     func(v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && b, nil },
	"false":    func(v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && !b, nil },
	"mapping":  func(v any, _ []any) (bool, error) { _, ok := v.(*Map); return ok, nil },
	"sequence": isSequence,
	"iterable": isSequence,
	"callable": func(v any, _ []any) (bool, error) { _, ok := v.(callable); return ok, nil },
	"equalto":  testEq,
	"eq":       testEq,
	"==":       testEq,
	"ne": func(v any, a []any) (bool, error) {
		ok, err := testEq(v, a)
		return !ok, err
	},
	"sameas": testEq,
	"in": func(v any, a []any) (bool, error) {
		if len(a) != 1 {
			return false, errors.New("in needs one argument")
		}
		return in(v, a[0])
	},
	"odd": func(v any, _ []any) (bool, error) {
		m, err := arith("%", v, int64(2))
		return err == nil && equal(m, int64(1)), err
	},
	"even": func(v any, _ []any) (bool, error) {
		m, err := arith("%", v, int64(2))
		return err == nil && equal(m, int64(0)), err
	},
	"divisibleby": func(v any, a []any) (bool, error) {
		n, ok := v.(int64)
		if len(a) != 1 {
			return false, errors.New("divisibleby needs one argument")
		}
		d, ok2 := a[0].(int64)
		if !ok || !ok2 || d == 0 {
			return false, errors.New("divisibleby needs non-zero integers")
		}
		return n%d == 0, nil
	},
	"lower": func(v any, _ []any) (bool, error) { s, ok := v.(string); return ok && strings.ToLower(s) == s, nil },
	"upper": func(v any, _ []any) (bool, error) { s, ok := v.(string); return ok && strings.ToUpper(s) == s, nil },
}

func isSequence(v any, _ []any) (bool, error) {
	switch v.(type) {
	case string, []any, *Map, Undefined: // Jinja2's Undefined has a length and iterates empty
		return true, nil
	}
	return false, nil
}

func testEq(v any, a []any) (bool, error) {
	if len(a) != 1 {
		return false, errors.New("needs one argument")
	}
	return equal(v, a[0]), nil
}

// method returns obj.name as a bound method when Python has one, else nil.
func method(obj any, name string) callable {
	switch o := obj.(type) {
	case string:
		return stringMethod(o, name)
	case *Map:
		switch name {
		case "items":
			return func(_ *state, _ []any, _ *Map) (any, error) { return mapItems(o), nil }
		case "keys":
			return func(_ *state, _ []any, _ *Map) (any, error) {
				l := make([]any, len(o.keys))
				for i, k := range o.keys {
					l[i] = k
				}
				return l, nil
			}
		case "values":
			return func(_ *state, _ []any, _ *Map) (any, error) {
				l := make([]any, len(o.keys))
				for i, k := range o.keys {
					l[i] = o.vals[k]
				}
				return l, nil
			}
		case "get":
			return func(_ *state, a []any, _ *Map) (any, error) {
				if len(a) == 0 {
					return nil, errors.New("get needs a key")
				}
				if k, ok := a[0].(string); ok {
					if v, ok := o.vals[k]; ok {
						return v, nil
					}
				}
				if len(a) > 1 {
					return a[1], nil
				}
				return nil, nil
			}
		}
	}
	return nil
}

func stringMethod(s, name string) callable {
	strArg := func(a []any, i int) (string, bool) {
		if i >= len(a) || a[i] == nil {
			return "", false
		}
		x, ok := a[i].(string)
		return x, ok
	}
	strip := func(trim func(string, string) string, trimSpace func(string, func(rune) bool) string) callable {
		return func(_ *state, a []any, _ *Map) (any, error) {
			if chars, ok := strArg(a, 0); ok {
				return trim(s, chars), nil
			}
			return trimSpace(s, unicode.IsSpace), nil
		}
	}
	switch name {
	case "strip":
		return strip(strings.Trim, strings.TrimFunc)
	case "lstrip":
		return strip(strings.TrimLeft, strings.TrimLeftFunc)
	case "rstrip":
		return strip(strings.TrimRight, strings.TrimRightFunc)
	case "startswith", "endswith":
		return func(_ *state, a []any, _ *Map) (any, error) {
			var cands []string
			if len(a) > 0 {
				switch x := a[0].(type) {
				case string:
					cands = []string{x}
				case []any:
					for _, y := range x {
						cands = append(cands, str(y))
					}
				default:
					return nil, fmt.Errorf("%s arg must be str or a tuple of str, not %s", name, typeName(x))
				}
			}
			for _, c := range cands {
				if (name == "startswith" && strings.HasPrefix(s, c)) || (name == "endswith" && strings.HasSuffix(s, c)) {
					return true, nil
				}
			}
			return false, nil
		}
	case "split", "rsplit":
		return func(_ *state, a []any, _ *Map) (any, error) {
			sep, hasSep := strArg(a, 0)
			maxSplit := int64(-1)
			if len(a) > 1 {
				if n, ok := a[1].(int64); ok {
					maxSplit = n
				}
			}
			var parts []string
			switch {
			case hasSep && sep == "":
				return nil, errors.New("empty separator")
			case hasSep && maxSplit < 0:
				parts = strings.Split(s, sep)
			case hasSep && name == "split":
				parts = strings.SplitN(s, sep, int(min(maxSplit, 1<<20))+1)
			case hasSep:
				parts = rsplitN(s, sep, int(min(maxSplit, 1<<20)))
			default:
				if maxSplit >= 0 {
					return nil, errors.New("split with maxsplit and no separator is not supported")
				}
				parts = strings.Fields(s)
			}
			l := make([]any, len(parts))
			for i, p := range parts {
				l[i] = p
			}
			return l, nil
		}
	case "upper":
		return func(_ *state, _ []any, _ *Map) (any, error) { return strings.ToUpper(s), nil }
	case "lower":
		return func(_ *state, _ []any, _ *Map) (any, error) { return strings.ToLower(s), nil }
	case "title":
		return func(_ *state, _ []any, _ *Map) (any, error) {
			rs := []rune(s)
			prevLetter := false
			for i, r := range rs {
				if unicode.IsLetter(r) {
					if prevLetter {
						rs[i] = unicode.ToLower(r)
					} else {
						rs[i] = unicode.ToUpper(r)
					}
					prevLetter = true
				} else {
					prevLetter = false
				}
			}
			return string(rs), nil
		}
	case "capitalize":
		return func(st *state, _ []any, _ *Map) (any, error) { return filters["capitalize"](st, s, nil, nil) }
	case "replace":
		return func(_ *state, a []any, _ *Map) (any, error) {
			old, ok1 := strArg(a, 0)
			nw, ok2 := strArg(a, 1)
			if !ok1 || !ok2 {
				return nil, errors.New("replace needs two strings")
			}
			n := -1
			if len(a) > 2 {
				if c, ok := a[2].(int64); ok && c >= 0 {
					n = int(min(c, 1<<30))
				}
			}
			if old == "" && int64(len(s)+1)*int64(len(nw)) > maxOutput {
				return nil, errors.New("result too large")
			}
			return strings.Replace(s, old, nw, n), nil
		}
	case "find":
		return func(_ *state, a []any, _ *Map) (any, error) {
			sub, ok := strArg(a, 0)
			if !ok {
				return nil, errors.New("find needs a string")
			}
			i := strings.Index(s, sub)
			if i < 0 {
				return int64(-1), nil
			}
			return int64(len([]rune(s[:i]))), nil
		}
	case "count":
		return func(_ *state, a []any, _ *Map) (any, error) {
			sub, ok := strArg(a, 0)
			if !ok {
				return nil, errors.New("count needs a string")
			}
			return int64(strings.Count(s, sub)), nil
		}
	case "join":
		return func(_ *state, a []any, _ *Map) (any, error) {
			if len(a) != 1 {
				return nil, errors.New("join needs one argument")
			}
			l, err := iterate(a[0], 0)
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(l))
			for i, x := range l {
				xs, ok := x.(string)
				if !ok {
					return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(x))
				}
				parts[i] = xs
			}
			return strings.Join(parts, s), nil
		}
	case "splitlines":
		return func(_ *state, _ []any, _ *Map) (any, error) {
			parts := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
			if s == "" {
				parts = nil
			}
			l := make([]any, len(parts))
			for i, p := range parts {
				l[i] = p
			}
			return l, nil
		}
	case "isdigit":
		return func(_ *state, _ []any, _ *Map) (any, error) {
			if s == "" {
				return false, nil
			}
			for _, r := range s {
				if !unicode.IsDigit(r) {
					return false, nil
				}
			}
			return true, nil
		}
	}
	return nil
}

func rsplitN(s, sep string, n int) []string {
	var out []string
	for n > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
		n--
	}
	out = append(out, s)
	slices.Reverse(out)
	return out
}

// globals are the names every render sees, as transformers provides them.
func globals(now func() time.Time) map[string]any {
	return map[string]any{
		"range": callable(func(_ *state, a []any, _ *Map) (any, error) {
			var lo, hi, step int64 = 0, 0, 1
			ints := make([]int64, len(a))
			for i, x := range a {
				n, ok := asInt(x)
				if !ok {
					return nil, fmt.Errorf("range() needs integers, got %s", typeName(x))
				}
				ints[i] = n
			}
			switch len(ints) {
			case 1:
				hi = ints[0]
			case 2:
				lo, hi = ints[0], ints[1]
			case 3:
				lo, hi, step = ints[0], ints[1], ints[2]
			default:
				return nil, errors.New("range() takes 1 to 3 arguments")
			}
			if step == 0 {
				return nil, errors.New("range() arg 3 must not be zero")
			}
			var l []any
			for i := lo; (step > 0 && i < hi) || (step < 0 && i > hi); i += step {
				if len(l) >= maxRangeItems {
					return nil, fmt.Errorf("range() longer than %d", maxRangeItems)
				}
				l = append(l, i)
			}
			if l == nil {
				l = []any{}
			}
			return l, nil
		}),
		"namespace": callable(func(_ *state, a []any, kw *Map) (any, error) {
			m := NewMap()
			for _, x := range a {
				if d, ok := x.(*Map); ok {
					for _, k := range d.keys {
						m.Set(k, d.vals[k])
					}
				}
			}
			if kw != nil {
				for _, k := range kw.keys {
					m.Set(k, kw.vals[k])
				}
			}
			return &namespace{m}, nil
		}),
		"dict": callable(func(_ *state, a []any, kw *Map) (any, error) {
			m := NewMap()
			if kw != nil {
				for _, k := range kw.keys {
					m.Set(k, kw.vals[k])
				}
			}
			return m, nil
		}),
		"raise_exception": callable(func(_ *state, a []any, _ *Map) (any, error) {
			msg := ""
			if len(a) > 0 {
				msg = str(a[0])
			}
			return nil, &raisedError{msg}
		}),
		"strftime_now": callable(func(_ *state, a []any, _ *Map) (any, error) {
			if len(a) != 1 {
				return nil, errors.New("strftime_now needs a format")
			}
			return strftime(now(), str(a[0]))
		}),
	}
}

// strftime implements the C directives the templates use ("%d %B %Y", "%Y-%m-%d", "%b").
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&b, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'B':
			b.WriteString(t.Month().String())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime directive %%%c is not supported", f[i])
		}
	}
	return b.String(), nil
}
