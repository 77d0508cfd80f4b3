package tool

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestPythonTool(t *testing.T) {
	p := NewPython(newTestSandbox(t, DefaultSandboxLimits()))
	if p.Name() != "python" || p.Description() == "" || !json.Valid(p.Schema()) {
		t.Fatalf("bad metadata: %q %q %s", p.Name(), p.Description(), p.Schema())
	}
	tests := []struct {
		name, args string
		want       string // exact result; empty when wantErr
		wantErr    string // substring of the error
	}{
		{name: "prints", args: `{"code":"print(2+3)"}`, want: "5\n"},
		{name: "no output", args: `{"code":"x = 1"}`, want: "[no output]"},
		{name: "exit status", args: `{"code":"import sys; print('a'); sys.exit(2)"}`, want: "a\n[exit status 2]"},
		{name: "stderr shown", args: `{"code":"import sys; sys.stderr.write('warn')"}`, want: "[stderr]\nwarn"},
		{name: "exception", args: `{"code":"1/0"}`, want: "[stderr]\nTraceback (most recent call last):\n  File \"main.py\", line 1, in <module>\nZeroDivisionError: division by zero\n[exit status 1]"},
		{name: "not json", args: `print(1)`, wantErr: "arguments must be"},
		{name: "array", args: `["print(1)"]`, wantErr: "arguments must be"},
		{name: "null", args: `null`, wantErr: "missing"},
		{name: "missing code", args: `{}`, wantErr: "missing"},
		{name: "code not a string", args: `{"code": 1}`, wantErr: "arguments must be"},
		{name: "unknown field", args: `{"code":"print(1)","lang":"py"}`, wantErr: "unknown field"},
		{name: "trailing data", args: `{"code":"print(1)"} {}`, wantErr: "single JSON object"},
		{name: "empty code", args: `{"code":""}`, wantErr: "empty"},
		{name: "huge code", args: `{"code":"` + strings.Repeat("#", 70000) + `"}`, wantErr: "over the limit"},
		{name: "huge arguments", args: `{"code":"` + strings.Repeat(`\u0023`, 30000) + `"}`, wantErr: "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.Call(context.Background(), json.RawMessage(tc.args))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q (result %q)", err, tc.wantErr, got)
				}
				if errors.Is(err, ErrInfra) {
					t.Fatalf("bad arguments reported as infrastructure failure: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("result %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCappedBuffer(t *testing.T) {
	tests := []struct {
		name      string
		limit     int
		writes    []string
		want      string
		truncated bool
		flooded   bool
	}{
		{name: "fits", limit: 8, writes: []string{"abc", "def"}, want: "abcdef"},
		{name: "exactly full", limit: 8, writes: []string{"abcdefgh"}, want: "abcdefgh"},
		{name: "head and tail", limit: 8, writes: []string{"abcdefghij", "klmn"}, want: "abcdef\n…[6 bytes truncated]…\nmn", truncated: true},
		{name: "many small writes", limit: 8, writes: strings.Split("0123456789abcdef", ""), want: "012345\n…[8 bytes truncated]…\nef", truncated: true},
		{name: "flood", limit: 4, writes: []string{strings.Repeat("x", 4*outputKillFactor+1)}, want: "xxx\n…[" + "253" + " bytes truncated]…\nx", truncated: true, flooded: true},
		{name: "split rune made valid", limit: 4, writes: []string{"ab\xe2\x9c"}, want: "ab\ufffd"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			flooded := false
			b := newCappedBuffer(tc.limit, func() { flooded = true })
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			got, truncated := b.String()
			if got != tc.want || truncated != tc.truncated || flooded != tc.flooded {
				t.Fatalf("got %q truncated %v flooded %v, want %q %v %v", got, truncated, flooded, tc.want, tc.truncated, tc.flooded)
			}
		})
	}
}
