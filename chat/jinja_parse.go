package chat

import (
	"strconv"
	"strings"
)

// The parser turns segments into a tree. Everything a template names that the engine does not
// implement (a tag, a filter, a test, an operator) is refused here, with its line, so a template
// that loads renders with its meaning.

type node interface{}

type (
	textNode   struct{ s string }
	outputNode struct{ x expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		targets []string
		iter    expr
		cond    expr
		body    []node
		els     []node
		line    int
	}
	setNode struct {
		targets []string // one or more names, or
		ns      string   // namespace attribute assignment ns.attr
		attr    string
		x       expr
		body    []node // block set
		line    int
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // nil where the parameter has none
		body     []node
	}
	breakNode    struct{ line int }
	continueNode struct{ line int }
)

type expr interface{}

type (
	literal  struct{ v any }
	nameExpr struct {
		name string
		line int
	}
	attrExpr struct {
		obj  expr
		name string
		line int
	}
	indexExpr struct {
		obj, idx expr
		line     int
	}
	sliceExpr struct {
		obj, lo, hi, step expr
		line              int
	}
	callExpr struct {
		fn     expr
		args   []expr
		kwName []string
		kwArgs []expr
		line   int
	}
	filterExpr struct {
		obj    expr
		name   string
		args   []expr
		kwName []string
		kwArgs []expr
		line   int
	}
	testExpr struct {
		obj    expr
		name   string
		args   []expr
		negate bool
		line   int
	}
	binExpr struct {
		op   string
		l, r expr
		line int
	}
	unaryExpr struct {
		op   string
		x    expr
		line int
	}
	condExpr struct{ cond, a, b expr }
	listExpr struct{ items []expr }
	dictExpr struct{ keys, vals []expr }
)

type parser struct {
	segs    []segment
	pos     int
	endLine int // the template's last line
}

func parse(src string) ([]node, error) {
	segs, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{segs: segs, endLine: 1 + strings.Count(strings.TrimSuffix(src, "\n"), "\n")}
	body, end, err := p.body()
	if err != nil {
		return nil, err
	}
	if end != nil {
		return nil, synErr(end.line, "unexpected {%% %s %%}", end.name)
	}
	return body, nil
}

// endTag is the block tag that ended a body: its name and a token stream over the rest.
type endTag struct {
	name string
	ts   *tokStream
	line int
}

// body parses nodes up to a block tag it does not open (endif, else, ...) or the end of input.
func (p *parser) body() ([]node, *endTag, error) {
	var out []node
	for p.pos < len(p.segs) {
		s := p.segs[p.pos]
		p.pos++
		switch s.kind {
		case segText:
			out = append(out, &textNode{s.text})
		case segVar:
			ts := &tokStream{toks: s.toks, line: s.line}
			x, err := ts.expression()
			if err != nil {
				return nil, nil, err
			}
			if err := ts.done(); err != nil {
				return nil, nil, err
			}
			out = append(out, &outputNode{x})
		case segBlock:
			ts := &tokStream{toks: s.toks, line: s.line}
			name := ts.next()
			if name.kind != tkName {
				return nil, nil, synErr(s.line, "expected a tag name, got %s", name)
			}
			var n node
			var err error
			switch name.val {
			case "if":
				n, err = p.ifTag(ts)
			case "for":
				n, err = p.forTag(ts)
			case "set":
				n, err = p.setTag(ts)
			case "macro":
				n, err = p.macroTag(ts)
			case "break":
				n, err = &breakNode{s.line}, ts.done()
			case "continue":
				n, err = &continueNode{s.line}, ts.done()
			case "generation":
				// transformers' {% generation %} marks assistant text; it renders its body.
				if err = ts.done(); err == nil {
					var b []node
					b, err = p.expectEnd("endgeneration")
					n = &ifNode{conds: []expr{&literal{true}}, bodies: [][]node{b}}
				}
			case "endif", "endfor", "else", "elif", "endset", "endmacro", "endgeneration":
				return out, &endTag{name: name.val, ts: ts, line: s.line}, nil
			default:
				return nil, nil, synErr(s.line, "unsupported tag {%% %s %%}", name.val)
			}
			if err != nil {
				return nil, nil, err
			}
			out = append(out, n)
		}
	}
	return out, nil, nil
}

func (p *parser) expectEnd(names ...string) ([]node, error) {
	body, end, err := p.body()
	if err != nil {
		return nil, err
	}
	if end == nil {
		return nil, synErr(p.lastLine(), "missing {%% %s %%}", names[0])
	}
	for _, n := range names {
		if end.name == n {
			return body, end.ts.done()
		}
	}
	return nil, synErr(end.line, "unexpected {%% %s %%}, expected {%% %s %%}", end.name, names[0])
}

func (p *parser) lastLine() int {
	return p.endLine
}

func (p *parser) ifTag(ts *tokStream) (node, error) {
	n := &ifNode{}
	cond, err := ts.expression()
	if err != nil {
		return nil, err
	}
	if err := ts.done(); err != nil {
		return nil, err
	}
	for {
		body, end, err := p.body()
		if err != nil {
			return nil, err
		}
		if end == nil {
			return nil, synErr(p.lastLine(), "missing {%% endif %%}")
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end.name {
		case "endif":
			return n, end.ts.done()
		case "elif":
			if cond, err = end.ts.expression(); err != nil {
				return nil, err
			}
			if err := end.ts.done(); err != nil {
				return nil, err
			}
		case "else":
			if err := end.ts.done(); err != nil {
				return nil, err
			}
			if n.els, err = p.expectEnd("endif"); err != nil {
				return nil, err
			}
			return n, nil
		default:
			return nil, synErr(end.line, "unexpected {%% %s %%} in {%% if %%}", end.name)
		}
	}
}

func (p *parser) forTag(ts *tokStream) (node, error) {
	n := &forNode{line: ts.line}
	for {
		t := ts.next()
		if t.kind != tkName {
			return nil, synErr(t.line, "expected a loop variable, got %s", t)
		}
		n.targets = append(n.targets, t.val)
		if !ts.acceptOp(",") {
			break
		}
	}
	if !ts.acceptName("in") {
		return nil, synErr(ts.line, "expected 'in' in {%% for %%}")
	}
	var err error
	if n.iter, err = ts.orExpr(); err != nil {
		return nil, err
	}
	if ts.acceptName("if") {
		if n.cond, err = ts.expression(); err != nil {
			return nil, err
		}
	}
	if ts.peek().kind == tkName && ts.peek().val == "recursive" {
		return nil, synErr(ts.line, "recursive loops are not supported")
	}
	if err := ts.done(); err != nil {
		return nil, err
	}
	body, end, err := p.body()
	if err != nil {
		return nil, err
	}
	if end == nil {
		return nil, synErr(p.lastLine(), "missing {%% endfor %%}")
	}
	n.body = body
	switch end.name {
	case "endfor":
		return n, end.ts.done()
	case "else":
		if err := end.ts.done(); err != nil {
			return nil, err
		}
		n.els, err = p.expectEnd("endfor")
		return n, err
	}
	return nil, synErr(end.line, "unexpected {%% %s %%} in {%% for %%}", end.name)
}

func (p *parser) setTag(ts *tokStream) (node, error) {
	n := &setNode{line: ts.line}
	t := ts.next()
	if t.kind != tkName {
		return nil, synErr(t.line, "expected a name to set, got %s", t)
	}
	if ts.acceptOp(".") {
		a := ts.next()
		if a.kind != tkName {
			return nil, synErr(a.line, "expected an attribute name, got %s", a)
		}
		n.ns, n.attr = t.val, a.val
	} else {
		n.targets = []string{t.val}
		for ts.acceptOp(",") {
			t := ts.next()
			if t.kind != tkName {
				return nil, synErr(t.line, "expected a name to set, got %s", t)
			}
			n.targets = append(n.targets, t.val)
		}
	}
	if ts.peek().kind == tkEOF && len(n.targets) == 1 {
		body, err := p.expectEnd("endset")
		if err != nil {
			return nil, err
		}
		n.body = body
		return n, nil
	}
	if !ts.acceptOp("=") {
		return nil, synErr(ts.line, "expected '=' in {%% set %%}")
	}
	x, err := ts.tupleOrExpr()
	if err != nil {
		return nil, err
	}
	n.x = x
	return n, ts.done()
}

func (p *parser) macroTag(ts *tokStream) (node, error) {
	t := ts.next()
	if t.kind != tkName {
		return nil, synErr(t.line, "expected a macro name, got %s", t)
	}
	n := &macroNode{name: t.val}
	if !ts.acceptOp("(") {
		return nil, synErr(ts.line, "expected '(' after the macro name")
	}
	for !ts.acceptOp(")") {
		if len(n.params) > 0 && !ts.acceptOp(",") {
			return nil, synErr(ts.line, "expected ',' between macro parameters")
		}
		a := ts.next()
		if a.kind != tkName {
			return nil, synErr(a.line, "expected a parameter name, got %s", a)
		}
		var def expr
		if ts.acceptOp("=") {
			var err error
			if def, err = ts.expression(); err != nil {
				return nil, err
			}
		}
		n.params = append(n.params, a.val)
		n.defaults = append(n.defaults, def)
	}
	if err := ts.done(); err != nil {
		return nil, err
	}
	body, err := p.expectEnd("endmacro")
	n.body = body
	return n, err
}

// tokStream parses expressions from one tag's tokens.
type tokStream struct {
	toks []token
	i    int
	line int
	nest int // brackets and calls open, bounded by maxExprDepth
}

func (ts *tokStream) peek() token {
	if ts.i < len(ts.toks) {
		return ts.toks[ts.i]
	}
	return token{kind: tkEOF, line: ts.line}
}

func (ts *tokStream) next() token {
	t := ts.peek()
	if ts.i < len(ts.toks) {
		ts.i++
		ts.line = t.line
	}
	return t
}

func (ts *tokStream) acceptOp(op string) bool {
	if t := ts.peek(); t.kind == tkOp && t.val == op {
		ts.next()
		return true
	}
	return false
}

func (ts *tokStream) acceptName(n string) bool {
	if t := ts.peek(); t.kind == tkName && t.val == n {
		ts.next()
		return true
	}
	return false
}

func (ts *tokStream) done() error {
	if t := ts.peek(); t.kind != tkEOF {
		return synErr(t.line, "unexpected %s", t)
	}
	return nil
}

func (ts *tokStream) expect(op string) error {
	if !ts.acceptOp(op) {
		return synErr(ts.peek().line, "expected %q, got %s", op, ts.peek())
	}
	return nil
}

// tupleOrExpr parses "a, b" as a list (a tuple) or a single expression.
func (ts *tokStream) tupleOrExpr() (expr, error) {
	x, err := ts.expression()
	if err != nil || ts.peek().kind != tkOp || ts.peek().val != "," {
		return x, err
	}
	items := []expr{x}
	for ts.acceptOp(",") {
		if t := ts.peek(); t.kind == tkEOF {
			break
		}
		y, err := ts.expression()
		if err != nil {
			return nil, err
		}
		items = append(items, y)
	}
	return &listExpr{items}, nil
}

const maxExprDepth = 200

func (ts *tokStream) expression() (expr, error) {
	a, err := ts.orExpr()
	if err != nil {
		return nil, err
	}
	if ts.acceptName("if") {
		cond, err := ts.orExpr()
		if err != nil {
			return nil, err
		}
		var b expr = &literal{undefinedValue("")}
		if ts.acceptName("else") {
			if b, err = ts.expression(); err != nil {
				return nil, err
			}
		}
		return &condExpr{cond, a, b}, nil
	}
	return a, nil
}

func (ts *tokStream) orExpr() (expr, error) {
	l, err := ts.andExpr()
	for err == nil && ts.acceptName("or") {
		var r expr
		r, err = ts.andExpr()
		l = &binExpr{op: "or", l: l, r: r, line: ts.line}
	}
	return l, err
}

func (ts *tokStream) andExpr() (expr, error) {
	l, err := ts.notExpr(0)
	for err == nil && ts.acceptName("and") {
		var r expr
		r, err = ts.notExpr(0)
		l = &binExpr{op: "and", l: l, r: r, line: ts.line}
	}
	return l, err
}

func (ts *tokStream) notExpr(depth int) (expr, error) {
	if depth > maxExprDepth {
		return nil, synErr(ts.line, "expression nested too deeply")
	}
	if ts.acceptName("not") {
		x, err := ts.notExpr(depth + 1)
		return &unaryExpr{op: "not", x: x, line: ts.line}, err
	}
	return ts.compare()
}

func (ts *tokStream) compare() (expr, error) {
	l, err := ts.math1()
	for err == nil {
		t := ts.peek()
		var op string
		switch {
		case t.kind == tkOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			ts.next()
		case t.kind == tkName && t.val == "in":
			op = "in"
			ts.next()
		case t.kind == tkName && t.val == "not" && ts.i+1 < len(ts.toks) && ts.toks[ts.i+1].kind == tkName && ts.toks[ts.i+1].val == "in":
			op = "not in"
			ts.next()
			ts.next()
		default:
			return l, nil
		}
		var r expr
		r, err = ts.math1()
		l = &binExpr{op: op, l: l, r: r, line: t.line}
	}
	return l, err
}

func (ts *tokStream) math1() (expr, error) {
	l, err := ts.concat()
	for err == nil {
		t := ts.peek()
		if t.kind != tkOp || (t.val != "+" && t.val != "-") {
			return l, nil
		}
		ts.next()
		var r expr
		r, err = ts.concat()
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, err
}

func (ts *tokStream) concat() (expr, error) {
	l, err := ts.math2()
	for err == nil && ts.acceptOp("~") {
		var r expr
		r, err = ts.math2()
		l = &binExpr{op: "~", l: l, r: r, line: ts.line}
	}
	return l, err
}

func (ts *tokStream) math2() (expr, error) {
	l, err := ts.pow()
	for err == nil {
		t := ts.peek()
		if t.kind != tkOp || (t.val != "*" && t.val != "/" && t.val != "//" && t.val != "%") {
			return l, nil
		}
		ts.next()
		var r expr
		r, err = ts.pow()
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, err
}

func (ts *tokStream) pow() (expr, error) {
	l, err := ts.unary(0)
	for err == nil && ts.acceptOp("**") {
		var r expr
		r, err = ts.unary(0)
		l = &binExpr{op: "**", l: l, r: r, line: ts.line}
	}
	return l, err
}

func (ts *tokStream) unary(depth int) (expr, error) {
	ts.nest++
	defer func() { ts.nest-- }()
	if depth > maxExprDepth || ts.nest > maxExprDepth {
		return nil, synErr(ts.line, "expression nested too deeply")
	}
	if t := ts.peek(); t.kind == tkOp && (t.val == "-" || t.val == "+") {
		ts.next()
		x, err := ts.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		var u expr = &unaryExpr{op: t.val, x: x, line: t.line}
		if u, err = ts.postfix(u, depth); err != nil {
			return nil, err
		}
		if depth > 0 { // "-x|f" is "(-x)|f": the outermost unary takes the filters
			return u, nil
		}
		return ts.filters(u)
	}
	x, err := ts.primary(depth)
	if err != nil {
		return nil, err
	}
	if x, err = ts.postfix(x, depth); err != nil {
		return nil, err
	}
	if depth > 0 {
		return x, nil
	}
	return ts.filters(x)
}

// filters parses "| name(args)" and "is [not] test" chains.
func (ts *tokStream) filters(x expr) (expr, error) {
	for {
		switch {
		case ts.acceptOp("|"):
			t := ts.next()
			if t.kind != tkName {
				return nil, synErr(t.line, "expected a filter name, got %s", t)
			}
			if _, ok := filters[t.val]; !ok {
				return nil, synErr(t.line, "unsupported filter %q", t.val)
			}
			f := &filterExpr{obj: x, name: t.val, line: t.line}
			if ts.acceptOp("(") {
				var err error
				if f.args, f.kwName, f.kwArgs, err = ts.callArgs(); err != nil {
					return nil, err
				}
			}
			x = f
		case ts.acceptName("is"):
			neg := ts.acceptName("not")
			t := ts.next()
			if t.kind != tkName {
				return nil, synErr(t.line, "expected a test name, got %s", t)
			}
			if _, ok := tests[t.val]; !ok {
				return nil, synErr(t.line, "unsupported test %q", t.val)
			}
			te := &testExpr{obj: x, name: t.val, negate: neg, line: t.line}
			if ts.acceptOp("(") {
				args, kn, _, err := ts.callArgs()
				if err != nil {
					return nil, err
				}
				if len(kn) > 0 {
					return nil, synErr(t.line, "test %q takes no keyword arguments", t.val)
				}
				te.args = args
			} else if p := ts.peek(); p.kind == tkString || p.kind == tkInt || p.kind == tkFloat || (p.kind == tkName && !isKeyword(p.val)) {
				// "x is divisibleby 3", "x is sameas none": one argument without parentheses.
				arg, err := ts.primary(0)
				if err != nil {
					return nil, err
				}
				if arg, err = ts.postfix(arg, 0); err != nil {
					return nil, err
				}
				te.args = []expr{arg}
			}
			x = te
		default:
			return x, nil
		}
	}
}

func isKeyword(s string) bool {
	switch s {
	case "and", "or", "not", "in", "is", "if", "else":
		return true
	}
	return false
}

func (ts *tokStream) postfix(x expr, depth int) (expr, error) {
	for {
		t := ts.peek()
		if t.kind != tkOp {
			return x, nil
		}
		switch t.val {
		case ".":
			ts.next()
			a := ts.next()
			switch a.kind {
			case tkName:
				x = &attrExpr{obj: x, name: a.val, line: a.line}
			case tkInt:
				n, _ := strconv.ParseInt(a.val, 10, 64)
				x = &indexExpr{obj: x, idx: &literal{n}, line: a.line}
			default:
				return nil, synErr(a.line, "expected an attribute name, got %s", a)
			}
		case "[":
			ts.next()
			var parts [3]expr
			colons := 0
			for {
				if p := ts.peek(); p.kind == tkOp && (p.val == ":" || p.val == "]") {
					if ts.acceptOp("]") {
						break
					}
					ts.next()
					colons++
					if colons > 2 {
						return nil, synErr(t.line, "too many ':' in a slice")
					}
					continue
				}
				if parts[colons] != nil {
					return nil, synErr(t.line, "expected ']' , got %s", ts.peek())
				}
				e, err := ts.expression()
				if err != nil {
					return nil, err
				}
				parts[colons] = e
			}
			if colons == 0 {
				if parts[0] == nil {
					return nil, synErr(t.line, "empty subscript")
				}
				x = &indexExpr{obj: x, idx: parts[0], line: t.line}
			} else {
				x = &sliceExpr{obj: x, lo: parts[0], hi: parts[1], step: parts[2], line: t.line}
			}
		case "(":
			ts.next()
			args, kn, kv, err := ts.callArgs()
			if err != nil {
				return nil, err
			}
			x = &callExpr{fn: x, args: args, kwName: kn, kwArgs: kv, line: t.line}
		default:
			return x, nil
		}
	}
}

// callArgs parses arguments after "(" up to and including ")".
func (ts *tokStream) callArgs() (args []expr, kwName []string, kwArgs []expr, err error) {
	for !ts.acceptOp(")") {
		if len(args)+len(kwName) > 0 {
			if err := ts.expect(","); err != nil {
				return nil, nil, nil, err
			}
			if ts.acceptOp(")") {
				break
			}
		}
		if t := ts.peek(); t.kind == tkName && ts.i+1 < len(ts.toks) && ts.toks[ts.i+1].kind == tkOp && ts.toks[ts.i+1].val == "=" {
			ts.next()
			ts.next()
			v, err := ts.expression()
			if err != nil {
				return nil, nil, nil, err
			}
			kwName = append(kwName, t.val)
			kwArgs = append(kwArgs, v)
			continue
		}
		if len(kwName) > 0 {
			return nil, nil, nil, synErr(ts.line, "positional argument after keyword argument")
		}
		v, err := ts.expression()
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, v)
	}
	return args, kwName, kwArgs, nil
}

func (ts *tokStream) primary(depth int) (expr, error) {
	if depth > maxExprDepth {
		return nil, synErr(ts.line, "expression nested too deeply")
	}
	t := ts.next()
	switch t.kind {
	case tkName:
		switch t.val {
		case "true", "True":
			return &literal{true}, nil
		case "false", "False":
			return &literal{false}, nil
		case "none", "None":
			return &literal{nil}, nil
		}
		if isKeyword(t.val) {
			return nil, synErr(t.line, "unexpected %q", t.val)
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tkString:
		s := t.val
		for ts.peek().kind == tkString { // adjacent literals concatenate
			s += ts.next().val
		}
		return &literal{s}, nil
	case tkInt:
		n, err := strconv.ParseInt(t.val, 10, 64)
		if err != nil {
			return nil, synErr(t.line, "integer %s out of range", t.val)
		}
		return &literal{n}, nil
	case tkFloat:
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, synErr(t.line, "bad number %s", t.val)
		}
		return &literal{f}, nil
	case tkOp:
		switch t.val {
		case "(":
			if ts.acceptOp(")") {
				return &listExpr{}, nil
			}
			x, err := ts.expression()
			if err != nil {
				return nil, err
			}
			if ts.acceptOp(")") {
				return x, nil
			}
			items := []expr{x}
			for ts.acceptOp(",") {
				if ts.acceptOp(")") {
					return &listExpr{items}, nil
				}
				y, err := ts.expression()
				if err != nil {
					return nil, err
				}
				items = append(items, y)
			}
			return &listExpr{items}, ts.expect(")")
		case "[":
			l := &listExpr{}
			for !ts.acceptOp("]") {
				if len(l.items) > 0 {
					if err := ts.expect(","); err != nil {
						return nil, err
					}
					if ts.acceptOp("]") {
						break
					}
				}
				y, err := ts.expression()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, y)
			}
			return l, nil
		case "{":
			d := &dictExpr{}
			for !ts.acceptOp("}") {
				if len(d.keys) > 0 {
					if err := ts.expect(","); err != nil {
						return nil, err
					}
					if ts.acceptOp("}") {
						break
					}
				}
				k, err := ts.expression()
				if err != nil {
					return nil, err
				}
				if err := ts.expect(":"); err != nil {
					return nil, err
				}
				v, err := ts.expression()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			return d, nil
		}
	}
	return nil, synErr(t.line, "unexpected %s", t)
}
