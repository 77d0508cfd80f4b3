package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Python is the "python" tool: it runs the model's code in a Sandbox and returns what the code
// printed. Exceptions, non-zero exits and limits the code hits come back as ordinary output
// (with the traceback and a status line), since they are the code's doing and the model learns
// from them; Call returns an error for bad arguments and, as a *SandboxError, for a sandbox
// that could not run the code at all.
type Python struct {
	sb *Sandbox
}

// NewPython returns the tool over sb.
func NewPython(sb *Sandbox) *Python { return &Python{sb: sb} }

// Name implements Tool.
func (*Python) Name() string { return "python" }

// Description implements Tool; kept short because it sits in every prompt.
func (*Python) Description() string {
	return "Run Python 3 code (no network, no files kept). Returns what it prints."
}

var pythonSchema = json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"Python source; print the values you want to see"}},"required":["code"],"additionalProperties":false}`)

// Schema implements Tool.
func (*Python) Schema() json.RawMessage { return pythonSchema }

type pythonArgs struct {
	Code *string `json:"code"`
}

// Call implements Tool.
func (p *Python) Call(ctx context.Context, args json.RawMessage) (string, error) {
	code, err := p.parseArgs(args)
	if err != nil {
		return "", err
	}
	res, err := p.sb.Run(ctx, code)
	if err != nil {
		return "", err
	}
	return res.Summary(), nil
}

func (p *Python) parseArgs(args json.RawMessage) (string, error) {
	// The JSON envelope may add escapes; allow for that on top of the source bound.
	if len(args) > 2*p.sb.limits.CodeBytes+64 {
		return "", fmt.Errorf("python: arguments are %d bytes, too large", len(args))
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	var a pythonArgs
	if err := dec.Decode(&a); err != nil {
		return "", fmt.Errorf("python: arguments must be {\"code\": string}: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", errors.New("python: arguments must be a single JSON object")
	}
	if a.Code == nil {
		return "", errors.New("python: missing \"code\"")
	}
	if err := p.sb.checkCode(*a.Code); err != nil {
		return "", err
	}
	return *a.Code, nil
}
