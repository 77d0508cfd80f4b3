package tool

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode/utf8"
)

// CalcLimits bounds what Evaluate will compute, so that no expression a model writes can take
// much memory or time. Zero fields take the defaults below; negative fields are invalid.
type CalcLimits struct {
	MaxExprBytes int   // length of the expression (default 256)
	MaxDepth     int   // nesting of parentheses and unary signs (default 32)
	MaxExponent  int64 // largest |exponent| of ^ (default 1024)
	MaxBits      int   // largest numerator or denominator of any intermediate value (default 4096 bits, ~1233 digits)
}

// Defaults of CalcLimits.
const (
	DefaultCalcMaxExprBytes = 256
	DefaultCalcMaxDepth     = 32
	DefaultCalcMaxExponent  = 1024
	DefaultCalcMaxBits      = 4096
)

// Validate rejects negative limits.
func (l CalcLimits) Validate() error {
	if l.MaxExprBytes < 0 || l.MaxDepth < 0 || l.MaxExponent < 0 || l.MaxBits < 0 {
		return fmt.Errorf("tool: calculator limits must not be negative: %+v", l)
	}
	return nil
}

func (l CalcLimits) withDefaults() CalcLimits {
	if l.MaxExprBytes == 0 {
		l.MaxExprBytes = DefaultCalcMaxExprBytes
	}
	if l.MaxDepth == 0 {
		l.MaxDepth = DefaultCalcMaxDepth
	}
	if l.MaxExponent == 0 {
		l.MaxExponent = DefaultCalcMaxExponent
	}
	if l.MaxBits == 0 {
		l.MaxBits = DefaultCalcMaxBits
	}
	return l
}

// ErrDivByZero is wrapped by the error for division (or a negative power) of zero.
var ErrDivByZero = errors.New("division by zero")

// CalcError is a failed evaluation; Pos is the 1-based byte position it refers to (0 when it is
// about the expression as a whole).
type CalcError struct {
	Pos int
	Err error
}

func (e *CalcError) Error() string {
	if e.Pos == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v at position %d", e.Err, e.Pos)
}

func (e *CalcError) Unwrap() error { return e.Err }

// Evaluate computes expr exactly over the rationals. The grammar, loosest binding first:
//
//	expr    = term { ("+" | "-") term }
//	term    = unary { ("*" | "/") unary }
//	unary   = ("-" | "+") unary | power
//	power   = primary [ ("^" | "**") unary ]        right-associative: 2^3^2 = 2^9
//	primary = number | "(" expr ")"
//	number  = digits [ "." digits ] | "." digits
//
// so -2^2 = -4 and 2^-1 = 1/2. "×", "÷" and "−" are read as "*", "/" and "-". Exponents must be
// integers. Every limit breach, syntax error and division by zero is a *CalcError.
func Evaluate(expr string, lim CalcLimits) (*big.Rat, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	lim = lim.withDefaults()
	if len(expr) > lim.MaxExprBytes {
		return nil, &CalcError{Err: fmt.Errorf("expression too long (%d bytes, limit %d)", len(expr), lim.MaxExprBytes)}
	}
	if !utf8.ValidString(expr) {
		return nil, &CalcError{Err: errors.New("expression is not valid UTF-8")}
	}
	p := &parser{src: expr, lim: lim}
	p.skipSpace()
	if p.pos == len(p.src) {
		return nil, &CalcError{Err: errors.New("empty expression")}
	}
	v, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.src) {
		r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
		return nil, p.errf("unexpected %q", r)
	}
	return v, nil
}

// FormatRat writes r as an integer ("-42") or a reduced fraction ("7/3"). Evaluate reads it back
// to the same value.
func FormatRat(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return r.String()
}

type parser struct {
	src   string
	pos   int
	depth int
	lim   CalcLimits
}

func (p *parser) errf(format string, args ...any) error {
	return &CalcError{Pos: p.pos + 1, Err: fmt.Errorf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) && strings.IndexByte(" \t\n\r", p.src[p.pos]) >= 0 {
		p.pos++
	}
}

// op consumes the next operator if it is one of want (after normalising the Unicode spellings)
// and returns it, or 0.
func (p *parser) op(want string) byte {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return 0
	}
	rest := p.src[p.pos:]
	var c byte
	n := 1
	switch {
	case strings.HasPrefix(rest, "**"):
		c, n = '^', 2
	case strings.HasPrefix(rest, "×"):
		c, n = '*', len("×")
	case strings.HasPrefix(rest, "÷"):
		c, n = '/', len("÷")
	case strings.HasPrefix(rest, "−"):
		c, n = '-', len("−")
	default:
		c = rest[0]
	}
	if strings.IndexByte(want, c) < 0 {
		return 0
	}
	p.pos += n
	return c
}

// enter counts one level of nesting; the caller defers p.leave.
func (p *parser) enter() error {
	p.depth++
	if p.depth > p.lim.MaxDepth {
		return p.errf("nested deeper than %d", p.lim.MaxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) expr() (*big.Rat, error) {
	v, err := p.term()
	for err == nil {
		p.skipSpace()
		at := p.pos
		c := p.op("+-")
		if c == 0 {
			return v, nil
		}
		var w *big.Rat
		if w, err = p.term(); err != nil {
			return nil, err
		}
		if c == '+' {
			v.Add(v, w)
		} else {
			v.Sub(v, w)
		}
		err = p.checkSize(v, at)
	}
	return nil, err
}

func (p *parser) term() (*big.Rat, error) {
	v, err := p.unary()
	for err == nil {
		p.skipSpace()
		at := p.pos
		c := p.op("*/")
		if c == 0 {
			return v, nil
		}
		var w *big.Rat
		if w, err = p.unary(); err != nil {
			return nil, err
		}
		if c == '*' {
			v.Mul(v, w)
		} else {
			if w.Sign() == 0 {
				return nil, &CalcError{Pos: at + 1, Err: ErrDivByZero}
			}
			v.Quo(v, w)
		}
		err = p.checkSize(v, at)
	}
	return nil, err
}

func (p *parser) unary() (*big.Rat, error) {
	c := p.op("-+")
	if c == 0 {
		return p.power()
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	v, err := p.unary()
	if err != nil {
		return nil, err
	}
	if c == '-' {
		v.Neg(v)
	}
	return v, nil
}

func (p *parser) power() (*big.Rat, error) {
	base, err := p.primary()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	at := p.pos
	if p.op("^") == 0 {
		return base, nil
	}
	// A chain 2^2^2^... recurses once per operator: count it as nesting.
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	exp, err := p.unary()
	if err != nil {
		return nil, err
	}
	return p.pow(base, exp, at)
}

// pow computes base^exp (at: 0-based index of the operator) after checking, from the operands' sizes alone, that the result fits
// the limits: the check must come first, since computing 9^1000000 is the attack.
func (p *parser) pow(base, exp *big.Rat, at int) (*big.Rat, error) {
	if !exp.IsInt() {
		return nil, &CalcError{Pos: at + 1, Err: errors.New("exponent must be an integer")}
	}
	e := exp.Num()
	if !e.IsInt64() || e.Int64() > p.lim.MaxExponent || e.Int64() < -p.lim.MaxExponent {
		return nil, &CalcError{Pos: at + 1, Err: fmt.Errorf("exponent beyond ±%d", p.lim.MaxExponent)}
	}
	n := e.Int64()
	if n < 0 && base.Sign() == 0 {
		return nil, &CalcError{Pos: at + 1, Err: ErrDivByZero}
	}
	abs := max(n, -n)
	if int64(base.Num().BitLen()-1)*abs > int64(p.lim.MaxBits) || int64(base.Denom().BitLen()-1)*abs > int64(p.lim.MaxBits) {
		return nil, &CalcError{Pos: at + 1, Err: fmt.Errorf("result too large (limit %d bits)", p.lim.MaxBits)}
	}
	num := new(big.Int).Exp(base.Num(), big.NewInt(abs), nil)
	den := new(big.Int).Exp(base.Denom(), big.NewInt(abs), nil)
	if n < 0 {
		num, den = den, num
	}
	if den.Sign() < 0 {
		num.Neg(num)
		den.Neg(den)
	}
	v := new(big.Rat).SetFrac(num, den)
	return v, p.checkSize(v, at)
}

// checkSize reports a value past the bit limit; at is the 0-based index the error points to.
func (p *parser) checkSize(v *big.Rat, at int) error {
	if v.Num().BitLen() > p.lim.MaxBits || v.Denom().BitLen() > p.lim.MaxBits {
		return &CalcError{Pos: at + 1, Err: fmt.Errorf("result too large (limit %d bits)", p.lim.MaxBits)}
	}
	return nil
}

func (p *parser) primary() (*big.Rat, error) {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return nil, p.errf("expected a number")
	}
	if p.src[p.pos] == '(' {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		p.pos++
		v, err := p.expr()
		if err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.src) || p.src[p.pos] != ')' {
			return nil, p.errf("expected ')'")
		}
		p.pos++
		return v, nil
	}
	return p.number()
}

func (p *parser) number() (*big.Rat, error) {
	start := p.pos
	digits, dot := 0, false
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && !dot {
			dot = true
		} else {
			break
		}
		p.pos++
	}
	if digits == 0 {
		p.pos = start
		if start < len(p.src) {
			r, _ := utf8.DecodeRuneInString(p.src[start:])
			return nil, p.errf("expected a number, found %q", r)
		}
		return nil, p.errf("expected a number")
	}
	v, ok := new(big.Rat).SetString(p.src[start:p.pos])
	if !ok {
		return nil, &CalcError{Pos: start + 1, Err: fmt.Errorf("bad number %q", p.src[start:p.pos])}
	}
	return v, p.checkSize(v, start)
}
