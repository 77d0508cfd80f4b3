package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The Split patterns of the families this package was measured on. Each is matched by a
// hand-written scanner that reproduces Oniguruma's leftmost-first alternation and backtracking for
// that exact pattern; any other pattern is compiled with regexp2, a backtracking engine with
// look-around and \p{…} classes (see BENCHMARKS.md for the speed of both).
const (
	// gpt2Pattern is the ByteLevel pre-tokenizer's built-in pattern (GPT-2, and any file that
	// writes it as a Split).
	gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// llama3Pattern is Llama 3.x's (and DeepSeek-V3's, SmolLM3's) Split.
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwenPattern is Qwen2/2.5/3's: Llama 3's with one digit per match.
	qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// handWrittenPatterns selects the hand-written scanners for the known patterns; benchmarks turn it
// off to measure regexp2 on the same files. It is read when a tokenizer is loaded.
var handWrittenPatterns = true

// splitPattern finds the matches of a Split (or Replace) pattern.
type splitPattern struct {
	src string
	// wordEnd, for a hand-written pattern, returns the end of the match that starts at s[i]: for
	// these patterns every position starts a match, so matches tile the text.
	wordEnd func(s string, i int) int
	lit     string // a String pattern
	re      *regexp2.Regexp
}

func compileSplitPattern(expr string, literal bool) (*splitPattern, error) {
	p := &splitPattern{src: expr}
	if literal {
		if expr == "" {
			return nil, fmt.Errorf("empty String pattern")
		}
		p.lit = expr
		return p, nil
	}
	if handWrittenPatterns {
		switch expr {
		case gpt2Pattern:
			p.wordEnd = gpt2WordEnd
			return p, nil
		case llama3Pattern:
			p.wordEnd = llama3WordEnd
			return p, nil
		case qwenPattern:
			p.wordEnd = qwenWordEnd
			return p, nil
		}
	}
	re, err := regexp2.Compile(expr, regexp2.Unicode)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", expr, err)
	}
	p.re = re
	return p, nil
}

// forEachMatch calls fn with the byte offsets of every non-overlapping match in s, left to right.
func (p *splitPattern) forEachMatch(s string, fn func(start, end int)) {
	switch {
	case p.wordEnd != nil:
		for i := 0; i < len(s); {
			e := p.wordEnd(s, i)
			fn(i, e)
			i = e
		}
	case p.re == nil:
		for i := 0; i <= len(s)-len(p.lit); {
			k := strings.Index(s[i:], p.lit)
			if k < 0 {
				return
			}
			fn(i+k, i+k+len(p.lit))
			i += k + len(p.lit)
		}
	default:
		// Without a MatchTimeout regexp2 reports no error; a match list is all it returns.
		idx, _ := p.re.FindAllStringIndex(s, -1)
		for _, m := range idx {
			fn(m[0], m[1])
		}
	}
}

// splitBehavior is Hugging Face's SplitDelimiterBehavior.
type splitBehavior uint8

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed": splitRemoved, "Isolated": splitIsolated, "MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext": splitMergedWithNext, "Contiguous": splitContiguous,
}

// span is a piece of a split: its offsets and whether it is a match of the pattern.
type span struct {
	start, end int
	match      bool
}

// splitSpans cuts s as Hugging Face's NormalizedString::split does: the pattern's matches and the
// text between them (flipped by invert), combined by behavior; empty pieces are dropped.
func splitSpans(s string, p *splitPattern, behavior splitBehavior, invert bool, out []span) []span {
	var all []span
	prev := 0
	p.forEachMatch(s, func(start, end int) {
		if prev != start {
			all = append(all, span{prev, start, invert})
		}
		all = append(all, span{start, end, !invert})
		prev = end
	})
	if prev != len(s) {
		all = append(all, span{prev, len(s), invert})
	}
	out = out[:0]
	switch behavior {
	case splitIsolated:
		out = append(out, all...)
	case splitRemoved:
		for _, sp := range all {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case splitMergedWithPrevious:
		prevMatch := false
		for _, sp := range all {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case splitMergedWithNext:
		prevMatch := false
		for i := len(all) - 1; i >= 0; i-- {
			sp := all[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case splitContiguous:
		prevMatch := false
		for _, sp := range all {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	}
	k := 0
	for _, sp := range out {
		if sp.end > sp.start {
			out[k] = sp
			k++
		}
	}
	return out[:k]
}

func isCRLF(c byte) bool { return c == '\r' || c == '\n' }

func llama3WordEnd(s string, i int) int { return llamaFamilyWordEnd(s, i, 3) }
func qwenWordEnd(s string, i int) int   { return llamaFamilyWordEnd(s, i, 1) }

// extendClass returns the end of the run of characters of class cls starting at j.
func extendClass(s string, j int, cls uint8) int {
	for j < len(s) {
		if b := s[j]; b < utf8.RuneSelf { // inlined ASCII path; classAt is not inlinable
			if asciiClass[b] != cls {
				break
			}
			j++
			continue
		}
		c, w := classAt(s, j)
		if c != cls {
			break
		}
		j += w
	}
	return j
}

// llamaFamilyWordEnd matches llama3Pattern (maxDigits 3) or qwenPattern (maxDigits 1) at s[i]:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)     contractions, any case
//	[^\r\n\p{L}\p{N}]?\p{L}+         a letter run, with one optional leading non-letter, non-digit
//	\p{N}{1,maxDigits}
//	 ?[^\s\p{L}\p{N}]+[\r\n]*        a run of other characters, then line breaks
//	\s*[\r\n]+                       whitespace up to and including its last line break
//	\s+(?!\S)|\s+                    whitespace, less its last character before a non-space
func llamaFamilyWordEnd(s string, i int, maxDigits int) int {
	c0 := s[i]
	if c0 == '\'' && i+1 < len(s) {
		switch s[i+1] | 0x20 { // ASCII lower case; other bytes never match below
		case 's', 't', 'm', 'd':
			return i + 2
		case 'r', 'v':
			if i+2 < len(s) && s[i+2]|0x20 == 'e' {
				return i + 3
			}
		case 'l':
			if i+2 < len(s) && s[i+2]|0x20 == 'l' {
				return i + 3
			}
		}
	}
	cls, n := classAt(s, i)
	switch cls {
	case clsLetter:
		return extendClass(s, i+n, clsLetter)
	case clsNumber:
		j := i + n
		for k := 1; k < maxDigits && j < len(s); k++ {
			c, w := classAt(s, j)
			if c != clsNumber {
				break
			}
			j += w
		}
		return j
	}
	// One optional non-letter, non-digit, non-line-break character before a letter run.
	if !isCRLF(c0) && i+n < len(s) {
		if c1, n1 := classAt(s, i+n); c1 == clsLetter {
			return extendClass(s, i+n+n1, clsLetter)
		}
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if c0 == ' ' && i+1 < len(s) {
		if c1, _ := classAt(s, i+1); c1 == clsOther {
			j = i + 1
		}
	}
	if c, _ := classAt(s, j); c == clsOther {
		j = extendClass(s, j, clsOther)
		for j < len(s) && isCRLF(s[j]) {
			j++
		}
		return j
	}
	// Whitespace (cls is clsSpace here).
	end, lastBreak, lastStart := i, -1, i
	for end < len(s) {
		c, w := classAt(s, end)
		if c != clsSpace {
			break
		}
		if isCRLF(s[end]) {
			lastBreak = end
		}
		lastStart = end
		end += w
	}
	switch {
	case lastBreak >= 0:
		return lastBreak + 1
	case end == len(s) || lastStart == i:
		return end
	}
	return lastStart
}
