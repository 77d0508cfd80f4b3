package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Calculator is the exact-arithmetic tool: it evaluates one expression over the rationals
// (math/big) and answers with an integer or a reduced fraction. It holds no state and is safe for
// concurrent use.
type Calculator struct {
	lim CalcLimits
}

// NewCalculator returns a calculator bounded by lim (zero fields take their defaults). It
// returns an error for negative limits.
func NewCalculator(lim CalcLimits) (*Calculator, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	return &Calculator{lim: lim.withDefaults()}, nil
}

// Name is "calculator".
func (c *Calculator) Name() string { return "calculator" }

// Description is one short line: the built-in policy pays for every prompt token.
func (c *Calculator) Description() string { return "exact arithmetic, + - * / ^ ( )" }

// Schema of the arguments.
func (c *Calculator) Schema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","description":"e.g. 4821 * 37 + 9912"}},"required":["expression"],"additionalProperties":false}`)
}

// Call evaluates args.expression. Every problem with the arguments or the expression is an
// error whose message is meant for the model.
func (c *Calculator) Call(ctx context.Context, args json.RawMessage) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	expr, err := expressionArg(args)
	if err != nil {
		return "", err
	}
	v, err := Evaluate(expr, c.lim)
	if err != nil {
		return "", err
	}
	return FormatRat(v), nil
}

// expressionArg extracts the one string argument, rejecting anything else by name.
func expressionArg(args json.RawMessage) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil || m == nil {
		return "", errors.New(`arguments must be {"expression": "..."}`)
	}
	var extra []string
	for k := range m {
		if k != "expression" {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return "", fmt.Errorf("unknown argument %q (want only \"expression\")", strings.Join(extra, ", "))
	}
	raw, ok := m["expression"]
	if !ok {
		return "", errors.New(`missing argument "expression"`)
	}
	var expr string
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte(`"`)) && json.Unmarshal(raw, &expr) == nil {
		return expr, nil
	}
	return "", errors.New(`"expression" must be a string`)
}
