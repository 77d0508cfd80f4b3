package serve

// The automaton of constrained decoding: a pushdown recognizer over bytes, its stack a linked
// list of immutable frames (so a state is one pointer, copied for free while the token mask is
// computed). The top frame reads the next byte; a frame that completes hands control back to its
// parent (resume), which already holds the state that follows its child. A nil state is the
// end: every byte is refused and the completion may stop.

type frameKind uint8

const (
	fValue    frameKind = iota // a value of node: dispatches on its first byte
	fObject                    // inside an object
	fArray                     // inside an array
	fString                    // inside a string (after the opening quote)
	fNumber                    // inside a number
	fLit                       // a fixed text
	fLitSet                    // one of several texts (enum values, property keys, tool names)
	fSpecial                   // one added token, matched by id (the tool-call tags)
	fToolCall                  // <tool_call>{"name":NAME,"arguments":ARGS}</tool_call>
	fReject                    // reads nothing: what follows a string whose inside alone is asked about
)

// Phases of the frames that have them.
const (
	// objects
	objOpen   = iota // after '{': a key or '}'
	objMember        // after a member: ',' or '}'
	objKey           // after ',': a key
	objColon         // after a free key: ':'
)

const (
	numSign  = iota // after '-'
	numZero         // a leading 0
	numInt          // integer digits
	numDot          // after '.'
	numFrac         // fraction digits
	numE            // after 'e'
	numESign        // after the exponent's sign
	numExp          // exponent digits
)

type frame struct {
	kind    frameKind
	phase   int
	node    *schemaNode
	pos     int      // fLit, fLitSet: bytes matched; fString: pending \u hex digits; fObject: next property
	text    string   // fLit
	cands   []int    // fLitSet: the texts still possible (indices into set)
	set     []string // fLitSet: every text
	value   bool     // fLitSet: an enum value (its parent is not told which)
	intOnly bool     // fNumber
	cont    int8     // fString: UTF-8 continuation bytes still due
	id      int32    // fSpecial
	tools   *toolGrammar
	parent  *frame
}

// toolGrammar is what a forced tool call may be.
type toolGrammar struct {
	names   []string      // the tools' names as JSON strings
	schemas []*schemaNode // their arguments
	open    *frame        // the frames of the tags: fSpecial, or fLit when the tokenizer has no such token
	close   *frame
}

const end = -1 // the end of the text, fed to check that the state may stop

// step feeds byte c (or end) to state f and returns the next state; ok is false when c is not
// allowed. With c == end, ok says whether the text may stop here.
func step(f *frame, c int) (*frame, bool) {
	for f != nil {
		next, consumed, ok := f.feed(c)
		if !ok {
			return nil, false
		}
		if consumed {
			return next, true
		}
		f = next // f completed without c: its parent reads c
	}
	return nil, c == end
}

// toolCallStart is the state before a forced tool call.
func toolCallStart(tg *toolGrammar) *frame {
	p := &frame{kind: fToolCall, tools: tg}
	open := *tg.open
	open.parent = p
	return &open
}

// valueFrame is the frame that reads one value of n, under parent.
func valueFrame(n *schemaNode, parent *frame) *frame {
	if n.enum != nil {
		set := n.enum
		return &frame{kind: fLitSet, set: set, cands: allIndices(len(set)), value: true, parent: parent}
	}
	return &frame{kind: fValue, node: n, parent: parent}
}

func allIndices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// resume is parent's state once its child completed; choice is the text a fLitSet child chose.
func resume(parent *frame, choice int) *frame {
	if parent == nil {
		return nil
	}
	switch parent.kind {
	case fObject:
		p := *parent
		if !p.node.fixed || choice < 0 { // a value ended, or a free key
			if p.phase == objKey || p.phase == objOpen {
				p.phase = objColon // a free key was read
			} else {
				p.phase = objMember
			}
			return &p
		}
		// A property key was chosen: its value follows.
		p.pos = choice + 1
		p.phase = objMember
		return valueFrame(p.node.props[choice].schema, &p)
	case fToolCall:
		p := *parent
		p.phase++
		switch p.phase {
		case 1:
			return &frame{kind: fLit, text: `{"name":`, parent: &p}
		case 2:
			return &frame{kind: fLitSet, set: p.tools.names, cands: allIndices(len(p.tools.names)), parent: &p}
		case 3:
			p.pos = choice
			return &frame{kind: fLit, text: `,"arguments":`, parent: &p}
		case 4:
			return valueFrame(p.tools.schemas[p.pos], &p)
		case 5:
			return &frame{kind: fLit, text: `}`, parent: &p}
		case 6:
			c := *p.tools.close
			c.parent = &p
			return &c
		}
		return resume(p.parent, -1)
	}
	return parent // fArray: already in its after-item state
}

// feed reads c. consumed false with ok true: f completed before c, and next is what reads c.
func (f *frame) feed(c int) (next *frame, consumed, ok bool) {
	switch f.kind {
	case fValue:
		return f.feedValue(c)
	case fObject:
		return f.feedObject(c)
	case fArray:
		return f.feedArray(c)
	case fString:
		return f.feedString(c)
	case fNumber:
		return f.feedNumber(c)
	case fLit:
		if c == end || f.text[f.pos] != byte(c) {
			return nil, false, false
		}
		if f.pos+1 == len(f.text) {
			return resume(f.parent, -1), true, true
		}
		g := *f
		g.pos++
		return &g, true, true
	case fLitSet:
		return f.feedLitSet(c)
	}
	return nil, false, false // fSpecial: read by token id only
}

func (f *frame) feedValue(c int) (*frame, bool, bool) {
	t := f.node.types
	switch {
	case c == '{' && t&tObject != 0:
		return &frame{kind: fObject, node: f.node, phase: objOpen, parent: f.parent}, true, true
	case c == '[' && t&tArray != 0:
		return &frame{kind: fArray, node: f.node, phase: 0, parent: f.parent}, true, true
	case c == '"' && t&tString != 0:
		return &frame{kind: fString, parent: f.parent}, true, true
	case (c == '-' || (c >= '0' && c <= '9')) && t&(tNumber|tInteger) != 0:
		n := &frame{kind: fNumber, intOnly: t&tNumber == 0, parent: f.parent}
		switch {
		case c == '-':
			n.phase = numSign
		case c == '0':
			n.phase = numZero
		default:
			n.phase = numInt
		}
		return n, true, true
	case c == 't' && t&tBool != 0:
		return &frame{kind: fLit, text: "true", pos: 1, parent: f.parent}, true, true
	case c == 'f' && t&tBool != 0:
		return &frame{kind: fLit, text: "false", pos: 1, parent: f.parent}, true, true
	case c == 'n' && t&tNull != 0:
		return &frame{kind: fLit, text: "null", pos: 1, parent: f.parent}, true, true
	}
	return nil, false, false
}

// anyNode is a schema that takes any value: json_object's members, free arrays' items.
var anyNode = &schemaNode{types: typeAny}

// keyChoices is the property keys that may come next: from pos up to the first required one.
func (f *frame) keyChoices() []int {
	var out []int
	for i := f.pos; i < len(f.node.props); i++ {
		out = append(out, i)
		if f.node.props[i].required {
			break
		}
	}
	return out
}

// mayClose reports whether no required property remains.
func (f *frame) mayClose() bool {
	for i := f.pos; i < len(f.node.props); i++ {
		if f.node.props[i].required {
			return false
		}
	}
	return true
}

func (f *frame) feedObject(c int) (*frame, bool, bool) {
	free := !f.node.fixed
	switch f.phase {
	case objOpen, objKey:
		if c == '}' && f.phase == objOpen && f.mayClose() {
			return resume(f.parent, -1), true, true
		}
		if c != '"' {
			return nil, false, false
		}
		if free {
			return &frame{kind: fString, parent: f}, true, true
		}
		keys := f.keyChoices()
		if len(keys) == 0 {
			return nil, false, false
		}
		set := make([]string, len(f.node.props))
		for i, p := range f.node.props {
			set[i] = p.key
		}
		ls := &frame{kind: fLitSet, set: set, cands: keys, parent: f}
		return ls.feed(c)
	case objColon:
		if c != ':' {
			return nil, false, false
		}
		p := *f
		p.phase = objMember
		return valueFrame(anyNode, &p), true, true
	case objMember:
		switch {
		case c == '}' && f.mayClose():
			return resume(f.parent, -1), true, true
		case c == ',' && (free || len(f.keyChoices()) > 0):
			p := *f
			p.phase = objKey
			return &p, true, true
		}
	}
	return nil, false, false
}

func (f *frame) feedArray(c int) (*frame, bool, bool) {
	items := f.node.items
	if items == nil {
		items = anyNode
	}
	switch f.phase {
	case 0: // after '['
		if c == ']' {
			return resume(f.parent, -1), true, true
		}
		p := *f
		p.phase = 1
		return valueFrame(items, &p).feed(c)
	case 1: // after an item
		switch c {
		case ']':
			return resume(f.parent, -1), true, true
		case ',':
			p := *f
			return valueFrame(items, &p), true, true
		}
	}
	return nil, false, false
}

func (f *frame) feedString(c int) (*frame, bool, bool) {
	if c == end {
		return nil, false, false
	}
	g := *f
	switch {
	case f.cont > 0:
		if c < 0x80 || c > 0xBF {
			return nil, false, false
		}
		g.cont--
	case f.pos > 0: // \u hex digits
		if !isHex(c) {
			return nil, false, false
		}
		g.pos--
	case f.phase == 1: // after a backslash
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			g.phase = 0
		case 'u':
			g.phase, g.pos = 0, 4
		default:
			return nil, false, false
		}
	case c == '"':
		return resume(f.parent, -1), true, true
	case c == '\\':
		g.phase = 1
	case c < 0x20:
		return nil, false, false
	case c < 0x80:
	case c >= 0xC2 && c <= 0xDF:
		g.cont = 1
	case c >= 0xE0 && c <= 0xEF:
		g.cont = 2
	case c >= 0xF0 && c <= 0xF4:
		g.cont = 3
	default:
		return nil, false, false
	}
	return &g, true, true
}

func isHex(c int) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func (f *frame) feedNumber(c int) (*frame, bool, bool) {
	digit := c >= '0' && c <= '9'
	g := *f
	switch f.phase {
	case numSign:
		switch {
		case c == '0':
			g.phase = numZero
		case digit:
			g.phase = numInt
		default:
			return nil, false, false
		}
		return &g, true, true
	case numZero, numInt:
		switch {
		case digit && f.phase == numInt:
			return f, true, true
		case c == '.' && !f.intOnly:
			g.phase = numDot
			return &g, true, true
		case (c == 'e' || c == 'E') && !f.intOnly:
			g.phase = numE
			return &g, true, true
		}
	case numDot:
		if digit {
			g.phase = numFrac
			return &g, true, true
		}
		return nil, false, false
	case numFrac:
		switch {
		case digit:
			return f, true, true
		case c == 'e' || c == 'E':
			g.phase = numE
			return &g, true, true
		}
	case numE:
		switch {
		case c == '+' || c == '-':
			g.phase = numESign
		case digit:
			g.phase = numExp
		default:
			return nil, false, false
		}
		return &g, true, true
	case numESign:
		if digit {
			g.phase = numExp
			return &g, true, true
		}
		return nil, false, false
	case numExp:
		if digit {
			return f, true, true
		}
	}
	// A complete number ends before c, which its parent reads.
	return resume(f.parent, -1), false, true
}

func (f *frame) feedLitSet(c int) (*frame, bool, bool) {
	choose := func(i int) *frame {
		if f.value {
			return resume(f.parent, -1)
		}
		return resume(f.parent, i)
	}
	var keep []int
	done := -1
	for _, i := range f.cands {
		s := f.set[i]
		if f.pos == len(s) {
			done = i
		} else if c != end && s[f.pos] == byte(c) {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		if done < 0 {
			return nil, false, false
		}
		return choose(done), false, true // a complete text ends before c
	}
	if len(keep) == 1 && f.pos+1 == len(f.set[keep[0]]) {
		return choose(keep[0]), true, true
	}
	g := *f
	g.cands, g.pos = keep, f.pos+1
	return &g, true, true
}

// feedText feeds text from state f: it succeeds as far as text is a prefix of an accepted one.
func feedText(f *frame, text string) (*frame, bool) {
	for i := 0; i < len(text); i++ {
		var ok bool
		if f, ok = step(f, int(text[i])); !ok {
			return nil, false
		}
	}
	return f, true
}
