package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestEvaluate(t *testing.T) {
	cases := []struct {
		expr string
		want string // FormatRat of the value, or the error text wanted as a substring
		err  bool
	}{
		{"4821 * 37 + 9912", "188289", false},
		{"1 + 2 * 3", "7", false},
		{"(1 + 2) * 3", "9", false},
		{"10 - 4 - 3", "3", false},
		{"100 / 10 / 5", "2", false},
		{"7 / 3", "7/3", false},
		{"-7 / 3", "-7/3", false},
		{"1.5 * 4", "6", false},
		{".5 + 0.25", "3/4", false},
		{"2^10", "1024", false},
		{"2**10", "1024", false},
		{"2^3^2", "512", false},
		{"-2^2", "-4", false},
		{"(-2)^2", "4", false},
		{"2^-2", "1/4", false},
		{"(2/3)^-2", "9/4", false},
		{"--3", "3", false},
		{"+-+3", "-3", false},
		{"3 × 4 ÷ 6 − 1", "1", false},
		{"  ( ( 12 ) )  ", "12", false},
		{"99999 * 99999 * 99999", "999970000299999", false},
		{"123456789012345678901234567890 + 1", "123456789012345678901234567891", false},
		{"0^0", "1", false},
		{"1 / 0", "division by zero at position 3", true},
		{"1 / (2 - 2)", "division by zero at position 3", true},
		{"1 ÷ 0", "division by zero at position 3", true},
		{"0^-1", "division by zero", true},
		{"", "empty expression", true},
		{"   ", "empty expression", true},
		{"1 +", "expected a number at position 4", true},
		{"1 + * 2", `expected a number, found '*' at position 5`, true},
		{"(1 + 2", "expected ')' at position 7", true},
		{"1 + 2)", `unexpected ')' at position 6`, true},
		{"2(3)", `unexpected '(' at position 2`, true},
		{"1e5", `unexpected 'e' at position 2`, true},
		{"1.2.3", `unexpected '.' at position 4`, true},
		{"abc", `expected a number, found 'a' at position 1`, true},
		{"2^0.5", "exponent must be an integer", true},
		{"2^100000", "exponent beyond ±1024", true},
		{"9^1024 * 9^1024", "result too large", true},
		{"99^1000", "result too large", true},
		{"2^1024^2", "exponent beyond", true},
		{"(2^1000)*(2^1000)*(2^1000)*(2^1000)*(2^1000)", "result too large", true},
		{strings.Repeat("(", 40) + "1" + strings.Repeat(")", 40), "nested deeper than 32", true},
		{strings.Repeat("-", 40) + "1", "nested deeper than 32", true},
		{strings.Repeat("1+", 200) + "1", "expression too long", true},
		{"1 + \xff", "not valid UTF-8", true},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			v, err := Evaluate(tc.expr, CalcLimits{})
			if tc.err {
				if err == nil {
					t.Fatalf("= %s, want error %q", FormatRat(v), tc.want)
				}
				var ce *CalcError
				if !errors.As(err, &ce) {
					t.Errorf("error %v is not a *CalcError", err)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Errorf("error %q, want it to contain %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want %s", err, tc.want)
			}
			if got := FormatRat(v); got != tc.want {
				t.Errorf("= %s, want %s", got, tc.want)
			}
		})
	}
}

func TestEvaluateDivByZeroIs(t *testing.T) {
	if _, err := Evaluate("5/0", CalcLimits{}); !errors.Is(err, ErrDivByZero) {
		t.Errorf("5/0: %v does not wrap ErrDivByZero", err)
	}
}

func TestCalcLimits(t *testing.T) {
	if _, err := NewCalculator(CalcLimits{MaxBits: -1}); err == nil {
		t.Error("negative limit accepted")
	}
	lim := CalcLimits{MaxExprBytes: 8, MaxDepth: 2, MaxExponent: 3, MaxBits: 16}
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{"1+2+3+4", true}, {"1+2+3+456", false}, {"((1))", true}, {"(((1)))", false}, {"--1", true}, {"---1", false}, {"2^2^2", false},
		{"2^3", true}, {"2^4", false}, {"65535", true}, {"65536", false}, {"255*257", true}, {"256*256", false},
	} {
		if _, err := Evaluate(tc.expr, lim); (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok=%v", tc.expr, err, tc.ok)
		}
	}
}

func TestCalculatorCall(t *testing.T) {
	c, err := NewCalculator(CalcLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(c.Schema()) {
		t.Fatal("schema is not valid JSON")
	}
	for _, tc := range []struct {
		args, want string
		err        bool
	}{
		{`{"expression": "6*7"}`, "42", false},
		{`{"expression": "1/3 + 1/6"}`, "1/2", false},
		{`{}`, `missing argument "expression"`, true},
		{`{"expression": 42}`, "must be a string", true},
		{`{"expression": null}`, "must be a string", true},
		{`{"expression": "1", "mode": "fast"}`, `unknown argument "mode"`, true},
		{`[1]`, "arguments must be", true},
		{`null`, "arguments must be", true},
		{`{"expression": "1/0"}`, "division by zero", true},
	} {
		got, err := c.Call(context.Background(), json.RawMessage(tc.args))
		switch {
		case tc.err && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %q, %v; want error containing %q", tc.args, got, err, tc.want)
		case !tc.err && (err != nil || got != tc.want):
			t.Errorf("%s: got %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Call(ctx, json.RawMessage(`{"expression":"1"}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// FuzzEvaluate checks that no expression panics or escapes the limits, and that every result
// reads back to itself through FormatRat.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{"4821 * 37 + 9912", "2^-3", "(1/3)^5", "-(-(-1))", "1/0", "9^9^9", "1.5.", "((", "2**3**2", "0.1+0.2"} {
		f.Add(s)
	}
	lim := CalcLimits{MaxBits: 512, MaxExponent: 64}
	f.Fuzz(func(t *testing.T, expr string) {
		v, err := Evaluate(expr, lim)
		if err != nil {
			var ce *CalcError
			if !errors.As(err, &ce) || ce.Pos < 0 || ce.Pos > len(expr)+1 {
				t.Fatalf("%q: error %v (%T) is not a positioned *CalcError", expr, err, err)
			}
			return
		}
		if v.Num().BitLen() > lim.MaxBits || v.Denom().BitLen() > lim.MaxBits {
			t.Fatalf("%q: result of %d/%d bits escapes the limit", expr, v.Num().BitLen(), v.Denom().BitLen())
		}
		back, err := Evaluate(FormatRat(v), CalcLimits{MaxExprBytes: 4096, MaxBits: 4096})
		if err != nil || back.Cmp(v) != 0 {
			t.Fatalf("%q = %s does not read back: %v %v", expr, FormatRat(v), back, err)
		}
	})
}

func ExampleEvaluate() {
	v, _ := Evaluate("4821 * 37 + 9912 / 8", CalcLimits{})
	fmt.Println(FormatRat(v))
	_, err := Evaluate("1 + 1 / (3 - 3)", CalcLimits{})
	fmt.Println(err)
	// Output:
	// 179616
	// division by zero at position 7
}
