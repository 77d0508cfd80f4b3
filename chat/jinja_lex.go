package chat

import (
	"fmt"
	"strings"
)

// The lexer splits a template into text and tags with Jinja2's whitespace rules as
// transformers configures them: trim_blocks and lstrip_blocks on, "-" and "+" modifiers, one
// trailing newline of the source dropped, "\r\n" and "\r" read as "\n".

type segKind int

const (
	segText  segKind = iota
	segVar           // {{ ... }}
	segBlock         // {% ... %}
)

type segment struct {
	kind segKind
	text string  // segText
	toks []token // segVar, segBlock: the tokens inside the delimiters
	line int
}

type tokKind int

const (
	tkName tokKind = iota
	tkString
	tkInt
	tkFloat
	tkOp
	tkEOF
)

type token struct {
	kind tokKind
	val  string
	line int
}

func (t token) String() string {
	switch t.kind {
	case tkEOF:
		return "end of tag"
	case tkString:
		return fmt.Sprintf("string %q", t.val)
	}
	return fmt.Sprintf("%q", t.val)
}

// SyntaxError is a template that cannot be honoured, with the line it is on.
type SyntaxError struct {
	Line int
	Msg  string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("chat template line %d: %s", e.Line, e.Msg) }

func synErr(line int, format string, a ...any) error {
	return &SyntaxError{Line: line, Msg: fmt.Sprintf(format, a...)}
}

// rawSeg is a segment before whitespace control is applied.
type rawSeg struct {
	segment
	comment               bool
	leftMinus, leftPlus   bool
	rightMinus, rightPlus bool
}

func lex(src string) ([]segment, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	var raw []rawSeg
	line := 1
	pos := 0
	for pos < len(src) {
		open := nextTagOpen(src, pos)
		if open < 0 {
			raw = append(raw, rawSeg{segment: segment{kind: segText, text: src[pos:], line: line}})
			break
		}
		if open > pos {
			raw = append(raw, rawSeg{segment: segment{kind: segText, text: src[pos:open], line: line}})
			line += strings.Count(src[pos:open], "\n")
		}
		r := rawSeg{segment: segment{line: line}}
		kind := src[open+1]
		i := open + 2
		if i < len(src) && src[i] == '-' {
			r.leftMinus = true
			i++
		} else if i < len(src) && src[i] == '+' {
			r.leftPlus = true
			i++
		}
		var end int
		switch kind {
		case '#':
			r.comment = true
			e := strings.Index(src[i:], "#}")
			if e < 0 {
				return nil, synErr(line, "unterminated comment")
			}
			end = i + e + 2
			if e > 0 && src[i+e-1] == '-' {
				r.rightMinus = true
			} else if e > 0 && src[i+e-1] == '+' {
				r.rightPlus = true
			}
		default:
			closer := byte('}')
			r.kind = segVar
			if kind == '%' {
				closer = '%'
				r.kind = segBlock
			}
			toks, after, err := lexTag(src, i, closer, line)
			if err != nil {
				return nil, err
			}
			// A "-" or "+" just before the closer was lexed as an operator: take it back.
			if n := len(toks); n > 0 && toks[n-1].kind == tkOp && (toks[n-1].val == "-" || toks[n-1].val == "+") && src[after-3] == toks[n-1].val[0] {
				if toks[n-1].val == "-" {
					r.rightMinus = true
				} else {
					r.rightPlus = true
				}
				toks = toks[:n-1]
			}
			r.toks = toks
			end = after
		}
		line += strings.Count(src[open:end], "\n")
		raw = append(raw, r)
		pos = end
	}
	applyWhitespace(raw)
	out := make([]segment, 0, len(raw))
	for _, r := range raw {
		if r.comment || (r.kind == segText && r.text == "") {
			continue
		}
		out = append(out, r.segment)
	}
	return out, nil
}

// nextTagOpen finds the next "{{", "{%" or "{#" at or after pos.
func nextTagOpen(src string, pos int) int {
	for {
		i := strings.IndexByte(src[pos:], '{')
		if i < 0 || pos+i+1 >= len(src) {
			return -1
		}
		i += pos
		switch src[i+1] {
		case '{', '%', '#':
			return i
		}
		pos = i + 1
	}
}

func applyWhitespace(raw []rawSeg) {
	isBlock := func(r *rawSeg) bool { return r.comment || r.kind == segBlock }
	isText := func(k int) bool { return k >= 0 && k < len(raw) && raw[k].kind == segText && !raw[k].comment }
	// Left sides first, on the source text: whether spaces begin a line is a fact of the
	// source, not of what trim_blocks later removes.
	for k := range raw {
		r := &raw[k]
		if r.kind == segText && !r.comment || !isText(k-1) {
			continue
		}
		prev := &raw[k-1]
		switch {
		case r.leftMinus:
			prev.text = strings.TrimRight(prev.text, " \t\n\v\f\r")
		case isBlock(r) && !r.leftPlus:
			// lstrip_blocks: spaces and tabs from the start of the line to the tag.
			nl := strings.LastIndexByte(prev.text, '\n')
			atLineStart := nl >= 0 || k == 1
			if atLineStart && strings.Trim(prev.text[nl+1:], " \t") == "" {
				prev.text = prev.text[:nl+1]
			}
		}
	}
	for k := range raw {
		r := &raw[k]
		if r.kind == segText && !r.comment || !isText(k+1) {
			continue
		}
		next := &raw[k+1]
		switch {
		case r.rightMinus:
			next.text = strings.TrimLeft(next.text, " \t\n\v\f\r")
		case isBlock(r) && !r.rightPlus:
			next.text = strings.TrimPrefix(next.text, "\n")
		}
	}
}

// lexTag reads the tokens of a tag from i up to its closer ("}}" or "%}") at bracket depth 0 and
// returns them with the index just past the closer.
func lexTag(src string, i int, closer byte, line int) ([]token, int, error) {
	var toks []token
	depth := 0
	for {
		for i < len(src) && strings.IndexByte(" \t\n\r\v\f", src[i]) >= 0 {
			if src[i] == '\n' {
				line++
			}
			i++
		}
		if i >= len(src) {
			return nil, 0, synErr(line, "unterminated tag")
		}
		c := src[i]
		if depth == 0 && c == closer && i+1 < len(src) && src[i+1] == '}' {
			return toks, i + 2, nil
		}
		// "-}}" / "-%}": the minus is a modifier, taken back by the caller.
		switch {
		case isNameStart(c):
			j := i + 1
			for j < len(src) && isNameChar(src[j]) {
				j++
			}
			toks = append(toks, token{tkName, src[i:j], line})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
				j++
			}
			kind := tkInt
			if j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
				kind = tkFloat
				j++
				for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && src[k] >= '0' && src[k] <= '9' {
					kind = tkFloat
					for k < len(src) && src[k] >= '0' && src[k] <= '9' {
						k++
					}
					j = k
				}
			}
			toks = append(toks, token{kind, strings.ReplaceAll(src[i:j], "_", ""), line})
			i = j
		case c == '\'' || c == '"':
			s, j, nl, err := lexString(src, i, line)
			if err != nil {
				return nil, 0, err
			}
			toks = append(toks, token{tkString, s, line})
			line += nl
			i = j
		default:
			op := ""
			for _, o := range []string{"//", "**", "==", "!=", "<=", ">="} {
				if strings.HasPrefix(src[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				if strings.IndexByte("+-*/%~<>=|.,:()[]{}", c) < 0 {
					return nil, 0, synErr(line, "unexpected character %q", c)
				}
				op = string(c)
			}
			switch op {
			case "(", "[", "{":
				depth++
			case ")", "]", "}":
				if depth == 0 {
					return nil, 0, synErr(line, "unexpected %q", op)
				}
				depth--
			}
			toks = append(toks, token{tkOp, op, line})
			i += len(op)
		}
	}
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isNameChar(c byte) bool  { return isNameStart(c) || c >= '0' && c <= '9' }

// lexString reads a quoted string literal with Python's escapes; it returns the value, the index
// past the closing quote and the newlines inside.
func lexString(src string, i, line int) (string, int, int, error) {
	q := src[i]
	var b strings.Builder
	nl := 0
	for j := i + 1; j < len(src); j++ {
		c := src[j]
		switch {
		case c == q:
			return b.String(), j + 1, nl, nil
		case c == '\\' && j+1 < len(src):
			j++
			switch e := src[j]; e {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'r':
				b.WriteByte('\r')
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'v':
				b.WriteByte('\v')
			case '0':
				b.WriteByte(0)
			case '\\', '\'', '"':
				b.WriteByte(e)
			case '\n':
				nl++
			case 'u', 'x', 'U':
				n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
				if j+n >= len(src) {
					return "", 0, 0, synErr(line+nl, "bad \\%c escape", e)
				}
				var r rune
				for _, h := range src[j+1 : j+1+n] {
					d := hexVal(byte(h))
					if d < 0 {
						return "", 0, 0, synErr(line+nl, "bad \\%c escape", e)
					}
					r = r*16 + rune(d)
				}
				b.WriteRune(r)
				j += n
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		default:
			if c == '\n' {
				nl++
			}
			b.WriteByte(c)
		}
	}
	return "", 0, 0, synErr(line, "unterminated string")
}

func hexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
