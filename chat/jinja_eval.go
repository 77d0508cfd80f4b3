package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Limits that keep any template, however written, from running away: a render that passes one
// is an error, never a hang or an exhausted stack.
const (
	maxOutput     = 16 << 20
	maxSteps      = 2_000_000
	maxCallDepth  = 64
	maxRangeItems = 1 << 20
)

// RenderError is a failure while rendering, with the template line.
type RenderError struct {
	Line int
	Msg  string
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("chat template line %d: %s", e.Line, e.Msg)
}

// raisedError is the template's own raise_exception.
type raisedError struct{ msg string }

func (e *raisedError) Error() string { return "chat template raised: " + e.msg }

func rtErr(line int, format string, a ...any) error {
	return &RenderError{Line: line, Msg: fmt.Sprintf(format, a...)}
}

type scope struct {
	vars   map[string]any
	parent *scope
}

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type state struct {
	out      strings.Builder
	steps    int
	maxSteps int
	depth    int
	root     *scope
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

func (st *state) step(line int) error {
	st.steps++
	if st.steps > st.maxSteps {
		return rtErr(line, "render exceeds %d steps", st.maxSteps)
	}
	if st.out.Len() > maxOutput {
		return rtErr(line, "render exceeds %d bytes", maxOutput)
	}
	return nil
}

func (st *state) exec(nodes []node, sc *scope) error {
	for _, n := range nodes {
		if err := st.step(0); err != nil {
			return err
		}
		switch n := n.(type) {
		case *textNode:
			st.out.WriteString(n.s)
		case *outputNode:
			v, err := st.eval(n.x, sc)
			if err != nil {
				return err
			}
			st.out.WriteString(str(v))
		case *ifNode:
			done := false
			for i, c := range n.conds {
				v, err := st.eval(c, sc)
				if err != nil {
					return err
				}
				if truthy(v) {
					if err := st.exec(n.bodies[i], sc); err != nil {
						return err
					}
					done = true
					break
				}
			}
			if !done && n.els != nil {
				if err := st.exec(n.els, sc); err != nil {
					return err
				}
			}
		case *forNode:
			if err := st.forLoop(n, sc); err != nil {
				return err
			}
		case *setNode:
			if err := st.set(n, sc); err != nil {
				return err
			}
		case *macroNode:
			sc.vars[n.name] = st.macro(n)
		case *breakNode:
			return errBreak
		case *continueNode:
			return errContinue
		}
	}
	return nil
}

func (st *state) set(n *setNode, sc *scope) error {
	var v any
	if n.body != nil {
		saved := st.out
		st.out = strings.Builder{}
		err := st.exec(n.body, sc)
		v = st.out.String()
		st.out = saved
		if err != nil {
			return err
		}
	} else {
		var err error
		if v, err = st.eval(n.x, sc); err != nil {
			return err
		}
	}
	if n.ns != "" {
		nsv, _ := sc.lookup(n.ns)
		ns, ok := nsv.(*namespace)
		if !ok {
			return rtErr(n.line, "cannot assign attribute on non-namespace object %s", n.ns)
		}
		ns.m.Set(n.attr, v)
		return nil
	}
	if len(n.targets) == 1 {
		sc.vars[n.targets[0]] = v
		return nil
	}
	l, err := unpack(v, len(n.targets), n.line)
	if err != nil {
		return err
	}
	for i, t := range n.targets {
		sc.vars[t] = l[i]
	}
	return nil
}

func unpack(v any, n, line int) ([]any, error) {
	l, ok := v.([]any)
	if !ok {
		if s, isStr := v.(string); isStr {
			l = stringItems(s)
		} else {
			return nil, rtErr(line, "cannot unpack %s", typeName(v))
		}
	}
	if len(l) != n {
		return nil, rtErr(line, "expected %d values to unpack, got %d", n, len(l))
	}
	return l, nil
}

func stringItems(s string) []any {
	var l []any
	for _, r := range s {
		l = append(l, string(r))
	}
	return l
}

// iterate lists what a for loop visits: list items, dict keys, string characters.
func iterate(v any, line int) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case *Map:
		l := make([]any, len(v.keys))
		for i, k := range v.keys {
			l[i] = k
		}
		return l, nil
	case string:
		return stringItems(v), nil
	case Undefined:
		return nil, nil // Jinja2 iterates an Undefined as empty
	}
	return nil, rtErr(line, "'%s' object is not iterable", typeName(v))
}

func (st *state) forLoop(n *forNode, sc *scope) error {
	iv, err := st.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(iv, n.line)
	if err != nil {
		return err
	}
	// Each iteration starts from the enclosing scope: what the body sets does not outlive it
	// (Jinja2's scoping; namespaces carry values across iterations).
	var inner *scope
	fresh := func() { inner = &scope{vars: map[string]any{}, parent: sc} }
	fresh()
	bind := func(it any) error {
		if len(n.targets) == 1 {
			inner.vars[n.targets[0]] = it
			return nil
		}
		l, err := unpack(it, len(n.targets), n.line)
		if err != nil {
			return err
		}
		for i, t := range n.targets {
			inner.vars[t] = l[i]
		}
		return nil
	}
	if n.cond != nil { // "for x in y if cond" filters before loop counts
		var kept []any
		for _, it := range items {
			if err := bind(it); err != nil {
				return err
			}
			c, err := st.eval(n.cond, inner)
			if err != nil {
				return err
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		if n.els != nil {
			return st.exec(n.els, sc)
		}
		return nil
	}
	for i, it := range items {
		fresh()
		if err := bind(it); err != nil {
			return err
		}
		if err := st.step(n.line); err != nil {
			return err
		}
		inner.vars["loop"] = &loopInfo{items: items, i: i}
		err := st.exec(n.body, inner)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

// loopInfo is the loop variable: index, index0, revindex, revindex0, first, last, length,
// previtem, nextitem and cycle.
type loopInfo struct {
	items []any
	i     int
}

func (l *loopInfo) attr(name string) (any, bool) {
	n, i := len(l.items), l.i
	switch name {
	case "index":
		return int64(i + 1), true
	case "index0":
		return int64(i), true
	case "revindex":
		return int64(n - i), true
	case "revindex0":
		return int64(n - i - 1), true
	case "first":
		return i == 0, true
	case "last":
		return i == n-1, true
	case "length":
		return int64(n), true
	case "previtem":
		if i > 0 {
			return l.items[i-1], true
		}
	case "nextitem":
		if i < n-1 {
			return l.items[i+1], true
		}
	case "cycle":
		return callable(func(_ *state, args []any, _ *Map) (any, error) {
			if len(args) == 0 {
				return nil, errors.New("loop.cycle needs at least one value")
			}
			return args[i%len(args)], nil
		}), true
	}
	return nil, false
}

func (st *state) macro(n *macroNode) callable {
	return func(st *state, args []any, kw *Map) (any, error) {
		if st.depth >= maxCallDepth {
			return nil, fmt.Errorf("macro %s: calls nested deeper than %d", n.name, maxCallDepth)
		}
		if len(args) > len(n.params) {
			return nil, fmt.Errorf("macro %s takes %d arguments, got %d", n.name, len(n.params), len(args))
		}
		sc := &scope{vars: map[string]any{}, parent: st.root}
		for i, p := range n.params {
			switch {
			case i < len(args):
				sc.vars[p] = args[i]
			case kw != nil && hasKey(kw, p):
				sc.vars[p], _ = kw.Get(p)
			case n.defaults[i] != nil:
				v, err := st.eval(n.defaults[i], sc)
				if err != nil {
					return nil, err
				}
				sc.vars[p] = v
			default:
				sc.vars[p] = undefinedValue(p)
			}
		}
		if kw != nil {
			for _, k := range kw.keys {
				if !contains(n.params, k) {
					return nil, fmt.Errorf("macro %s has no parameter %s", n.name, k)
				}
			}
		}
		st.depth++
		saved := st.out
		st.out = strings.Builder{}
		err := st.exec(n.body, sc)
		res := st.out.String()
		st.out = saved
		st.depth--
		if err == errBreak || err == errContinue {
			err = errors.New("break or continue outside a loop")
		}
		return res, err
	}
}

func hasKey(m *Map, k string) bool { _, ok := m.vals[k]; return ok }

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func (st *state) eval(x expr, sc *scope) (any, error) {
	if err := st.step(0); err != nil {
		return nil, err
	}
	switch x := x.(type) {
	case *literal:
		return x.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(x.name); ok {
			return v, nil
		}
		return undefinedValue(x.name), nil
	case *attrExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name, x.line)
	case *indexExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		idx, err := st.eval(x.idx, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, idx, x.line)
	case *sliceExpr:
		return st.slice(x, sc)
	case *callExpr:
		return st.call(x, sc)
	case *filterExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		args, kw, err := st.evalArgs(x.args, x.kwName, x.kwArgs, sc)
		if err != nil {
			return nil, err
		}
		v, err := filters[x.name](st, obj, args, kw)
		if err != nil {
			return nil, wrapLine(err, x.line, "filter "+x.name)
		}
		return v, nil
	case *testExpr:
		obj, err := st.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		args, _, err := st.evalArgs(x.args, nil, nil, sc)
		if err != nil {
			return nil, err
		}
		ok, err := tests[x.name](obj, args)
		if err != nil {
			return nil, wrapLine(err, x.line, "test "+x.name)
		}
		return ok != x.negate, nil
	case *unaryExpr:
		v, err := st.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch v := v.(type) {
			case int64:
				return -v, nil
			case float64:
				return -v, nil
			case bool:
				return -b2i(v), nil
			}
			return nil, rtErr(x.line, "bad operand type for unary -: %s", typeName(v))
		default:
			switch w := v.(type) {
			case int64, float64:
				return w, nil
			case bool:
				return b2i(w), nil
			}
			return nil, rtErr(x.line, "bad operand type for unary +: %s", typeName(v))
		}
	case *condExpr:
		c, err := st.eval(x.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return st.eval(x.a, sc)
		}
		return st.eval(x.b, sc)
	case *listExpr:
		l := make([]any, 0, len(x.items))
		for _, it := range x.items {
			v, err := st.eval(it, sc)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		return l, nil
	case *dictExpr:
		m := NewMap()
		for i := range x.keys {
			k, err := st.eval(x.keys[i], sc)
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, rtErr(0, "dict keys must be strings, got %s", typeName(k))
			}
			v, err := st.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			m.Set(ks, v)
		}
		return m, nil
	case *binExpr:
		return st.binary(x, sc)
	}
	return nil, fmt.Errorf("chat: unknown expression %T", x)
}

func wrapLine(err error, line int, what string) error {
	var re *RenderError
	var raised *raisedError
	if errors.As(err, &re) || errors.As(err, &raised) {
		return err
	}
	return rtErr(line, "%s: %v", what, err)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (st *state) evalArgs(args []expr, kwName []string, kwArgs []expr, sc *scope) ([]any, *Map, error) {
	vals := make([]any, len(args))
	for i, a := range args {
		v, err := st.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		vals[i] = v
	}
	var kw *Map
	if len(kwName) > 0 {
		kw = NewMap()
		for i, k := range kwName {
			v, err := st.eval(kwArgs[i], sc)
			if err != nil {
				return nil, nil, err
			}
			kw.Set(k, v)
		}
	}
	return vals, kw, nil
}

func (st *state) call(x *callExpr, sc *scope) (any, error) {
	var fn any
	var err error
	if a, ok := x.fn.(*attrExpr); ok { // a method of a value
		obj, err := st.eval(a.obj, sc)
		if err != nil {
			return nil, err
		}
		if m := method(obj, a.name); m != nil {
			fn = m
		} else if fn, err = getAttr(obj, a.name, a.line); err != nil {
			return nil, err
		}
	} else if fn, err = st.eval(x.fn, sc); err != nil {
		return nil, err
	}
	f, ok := fn.(callable)
	if !ok {
		if u, isU := fn.(Undefined); isU {
			return nil, rtErr(x.line, "'%s' is undefined", u.name)
		}
		return nil, rtErr(x.line, "'%s' object is not callable", typeName(fn))
	}
	args, kw, err := st.evalArgs(x.args, x.kwName, x.kwArgs, sc)
	if err != nil {
		return nil, err
	}
	v, err := f(st, args, kw)
	if err != nil {
		return nil, wrapLine(err, x.line, "call")
	}
	return v, nil
}

func getAttr(obj any, name string, line int) (any, error) {
	switch o := obj.(type) {
	case *Map:
		if v, ok := o.vals[name]; ok {
			return v, nil
		}
		return undefinedValue(name), nil
	case *namespace:
		if v, ok := o.m.vals[name]; ok {
			return v, nil
		}
		return undefinedValue(name), nil
	case *loopInfo:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
		return undefinedValue(name), nil
	case Undefined:
		return nil, rtErr(line, "'%s' is undefined (reading .%s)", o.name, name)
	case nil:
		return nil, rtErr(line, "'None' has no attribute '%s'", name)
	}
	if m := method(obj, name); m != nil {
		return m, nil
	}
	return undefinedValue(name), nil
}

func getItem(obj, idx any, line int) (any, error) {
	switch o := obj.(type) {
	case *Map:
		k, ok := idx.(string)
		if !ok {
			return undefinedValue(str(idx)), nil
		}
		if v, ok := o.vals[k]; ok {
			return v, nil
		}
		return undefinedValue(k), nil
	case *namespace:
		return getAttr(o, str(idx), line)
	case []any:
		i, ok := toIndex(idx)
		if !ok {
			return nil, rtErr(line, "list indices must be integers, not %s", typeName(idx))
		}
		if i < 0 {
			i += int64(len(o))
		}
		if i < 0 || i >= int64(len(o)) {
			return undefinedValue("list index"), nil
		}
		return o[i], nil
	case string:
		i, ok := toIndex(idx)
		if !ok {
			return nil, rtErr(line, "string indices must be integers, not %s", typeName(idx))
		}
		rs := []rune(o)
		if i < 0 {
			i += int64(len(rs))
		}
		if i < 0 || i >= int64(len(rs)) {
			return undefinedValue("string index"), nil
		}
		return string(rs[i]), nil
	case Undefined:
		return nil, rtErr(line, "'%s' is undefined (reading [%s])", o.name, repr(idx))
	case nil:
		return nil, rtErr(line, "'None' is not subscriptable")
	}
	if s, ok := idx.(string); ok {
		return getAttr(obj, s, line)
	}
	return nil, rtErr(line, "'%s' object is not subscriptable", typeName(obj))
}

func toIndex(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case bool:
		return b2i(v), true
	}
	return 0, false
}

func (st *state) slice(x *sliceExpr, sc *scope) (any, error) {
	obj, err := st.eval(x.obj, sc)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, e := range []expr{x.lo, x.hi, x.step} {
		if e == nil {
			continue
		}
		v, err := st.eval(e, sc)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		n, ok := toIndex(v)
		if !ok {
			return nil, rtErr(x.line, "slice indices must be integers or None")
		}
		bounds[i] = &n
	}
	var items []any
	s, isStr := obj.(string)
	switch o := obj.(type) {
	case []any:
		items = o
	case string:
		items = stringItems(o)
	default:
		return nil, rtErr(x.line, "'%s' object is not subscriptable", typeName(obj))
	}
	idx, err := sliceIndices(int64(len(items)), bounds)
	if err != nil {
		return nil, rtErr(x.line, "%v", err)
	}
	out := make([]any, 0, len(idx))
	for _, i := range idx {
		out = append(out, items[i])
	}
	if isStr {
		_ = s
		var b strings.Builder
		for _, c := range out {
			b.WriteString(c.(string))
		}
		return b.String(), nil
	}
	return out, nil
}

// sliceIndices is Python's slice.indices followed by range.
func sliceIndices(n int64, b [3]*int64) ([]int64, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	clamp := func(p *int64, def, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += n
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var start, stop int64
	if step > 0 {
		start = clamp(b[0], 0, 0, n)
		stop = clamp(b[1], n, 0, n)
	} else {
		start = clamp(b[0], n-1, -1, n-1)
		stop = clamp(b[1], -1, -1, n-1)
	}
	var out []int64
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, i)
	}
	return out, nil
}

func (st *state) binary(x *binExpr, sc *scope) (any, error) {
	l, err := st.eval(x.l, sc)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return st.eval(x.r, sc)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return st.eval(x.r, sc)
	}
	r, err := st.eval(x.r, sc)
	if err != nil {
		return nil, err
	}
	switch x.op {
	case "~":
		return str(l) + str(r), nil
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in", "not in":
		ok, err := in(l, r)
		if err != nil {
			return nil, rtErr(x.line, "%v", err)
		}
		return ok == (x.op == "in"), nil
	case "<", "<=", ">", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, rtErr(x.line, "'%s' not supported between %s and %s", x.op, typeName(l), typeName(r))
		}
		switch x.op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		}
		return c >= 0, nil
	}
	v, err := arith(x.op, l, r)
	if err != nil {
		return nil, rtErr(x.line, "%v", err)
	}
	if s, ok := v.(string); ok && len(s) > maxOutput {
		return nil, rtErr(x.line, "string exceeds %d bytes", maxOutput)
	}
	if lst, ok := v.([]any); ok && len(lst) > maxRangeItems {
		return nil, rtErr(x.line, "list exceeds %d items", maxRangeItems)
	}
	return v, nil
}

func arith(op string, l, r any) (any, error) {
	if lu, ok := l.(Undefined); ok {
		return nil, fmt.Errorf("'%s' is undefined", lu.name)
	}
	if ru, ok := r.(Undefined); ok {
		return nil, fmt.Errorf("'%s' is undefined", ru.name)
	}
	if op == "+" {
		switch lv := l.(type) {
		case string:
			if rv, ok := r.(string); ok {
				return lv + rv, nil
			}
		case []any:
			if rv, ok := r.([]any); ok {
				return append(append([]any{}, lv...), rv...), nil
			}
		}
	}
	if op == "*" {
		if lst, n, ok := listTimes(l, r); ok {
			if n <= 0 || len(lst) == 0 {
				return []any{}, nil
			}
			if int64(len(lst)) > maxRangeItems/n {
				return nil, fmt.Errorf("list exceeds %d items", maxRangeItems)
			}
			out := make([]any, 0, int64(len(lst))*n)
			for range n {
				out = append(out, lst...)
			}
			return out, nil
		}
		if s, n, ok := seqTimes(l, r); ok {
			if n > 0 && int64(len(s)) > maxOutput/n {
				return nil, fmt.Errorf("string exceeds %d bytes", maxOutput)
			}
			if n < 0 {
				n = 0
			}
			return strings.Repeat(s, int(n)), nil
		}
	}
	li, lInt := asInt(l)
	ri, rInt := asInt(r)
	if lInt && rInt {
		switch op {
		case "+":
			return li + ri, nil
		case "-":
			return li - ri, nil
		case "*":
			return li * ri, nil
		case "/":
			if ri == 0 {
				return nil, errors.New("division by zero")
			}
			return float64(li) / float64(ri), nil
		case "//":
			if ri == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case "%":
			if ri == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			m := li % ri
			if m != 0 && ((m < 0) != (ri < 0)) {
				m += ri
			}
			return m, nil
		case "**":
			if ri < 0 {
				return math.Pow(float64(li), float64(ri)), nil
			}
			if ri > 64 && li != 0 && li != 1 && li != -1 {
				return nil, errors.New("exponent too large")
			}
			p := int64(1)
			for range ri {
				p *= li
			}
			return p, nil
		}
	}
	lf, lNum := asFloat(l)
	rf, rNum := asFloat(r)
	if lNum && rNum {
		switch op {
		case "+":
			return lf + rf, nil
		case "-":
			return lf - rf, nil
		case "*":
			return lf * rf, nil
		case "/":
			if rf == 0 {
				return nil, errors.New("float division by zero")
			}
			return lf / rf, nil
		case "//":
			if rf == 0 {
				return nil, errors.New("float floor division by zero")
			}
			return math.Floor(lf / rf), nil
		case "%":
			if rf == 0 {
				return nil, errors.New("float modulo")
			}
			m := math.Mod(lf, rf)
			if m != 0 && ((m < 0) != (rf < 0)) {
				m += rf
			}
			return m, nil
		case "**":
			return math.Pow(lf, rf), nil
		}
	}
	return nil, fmt.Errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
}

func listTimes(l, r any) ([]any, int64, bool) {
	if s, ok := l.([]any); ok {
		if n, ok := asInt(r); ok {
			return s, n, true
		}
	}
	if s, ok := r.([]any); ok {
		if n, ok := asInt(l); ok {
			return s, n, true
		}
	}
	return nil, 0, false
}

func seqTimes(l, r any) (string, int64, bool) {
	if s, ok := l.(string); ok {
		if n, ok := asInt(r); ok {
			return s, n, true
		}
	}
	if s, ok := r.(string); ok {
		if n, ok := asInt(l); ok {
			return s, n, true
		}
	}
	return "", 0, false
}

func asInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case bool:
		return b2i(v), true
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch v := v.(type) {
	case int64:
		return float64(v), true
	case float64:
		return v, true
	case bool:
		return float64(b2i(v)), true
	}
	return 0, false
}

func equal(l, r any) bool {
	if lf, ok := asFloat(l); ok {
		if rf, ok := asFloat(r); ok {
			return lf == rf
		}
		return false
	}
	switch lv := l.(type) {
	case nil:
		return r == nil
	case Undefined:
		_, ok := r.(Undefined)
		return ok
	case string:
		rv, ok := r.(string)
		return ok && lv == rv
	case []any:
		rv, ok := r.([]any)
		if !ok || len(lv) != len(rv) {
			return false
		}
		for i := range lv {
			if !equal(lv[i], rv[i]) {
				return false
			}
		}
		return true
	case *Map:
		rv, ok := r.(*Map)
		if !ok || lv.Len() != rv.Len() {
			return false
		}
		for _, k := range lv.keys {
			w, ok := rv.vals[k]
			if !ok || !equal(lv.vals[k], w) {
				return false
			}
		}
		return true
	case *namespace:
		return l == r
	}
	return false
}

func compare(l, r any) (int, error) {
	if lf, ok := asFloat(l); ok {
		if rf, ok := asFloat(r); ok {
			switch {
			case lf < rf:
				return -1, nil
			case lf > rf:
				return 1, nil
			}
			return 0, nil
		}
	}
	if ls, ok := l.(string); ok {
		if rs, ok := r.(string); ok {
			return strings.Compare(ls, rs), nil
		}
	}
	if ll, ok := l.([]any); ok { // lists compare item by item, then by length
		if rl, ok := r.([]any); ok {
			for i := 0; i < len(ll) && i < len(rl); i++ {
				if equal(ll[i], rl[i]) {
					continue
				}
				return compare(ll[i], rl[i])
			}
			return compare(int64(len(ll)), int64(len(rl)))
		}
	}
	return 0, errors.New("not comparable")
}

func in(l, r any) (bool, error) {
	switch rv := r.(type) {
	case string:
		ls, ok := l.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(l))
		}
		return strings.Contains(rv, ls), nil
	case []any:
		for _, x := range rv {
			if equal(l, x) {
				return true, nil
			}
		}
		return false, nil
	case *Map:
		switch l.(type) {
		case []any, *Map:
			return false, fmt.Errorf("unhashable type: '%s'", typeName(l))
		}
		ls, ok := l.(string)
		return ok && hasKey(rv, ls), nil
	case *namespace:
		ls, ok := l.(string)
		return ok && hasKey(rv.m, ls), nil
	case Undefined:
		return false, nil // Jinja2's Undefined iterates as empty
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(r))
}
