// Package tool defines the Tool contract that environments hand to an agent, and the built-in
// tools (calculator, BM25 search, sandboxed Python); the MCP adapter is env/mcp.
//
// A tool call is untrusted model output: every Tool validates its arguments and returns an error
// for bad input rather than panicking. The error text is shown to the model as an observation.
package tool

import (
	"context"
	"encoding/json"
)

// Tool is one callable capability.
type Tool interface {
	// Name is the identifier the model writes in a tool call.
	Name() string
	// Description tells the model what the tool does.
	Description() string
	// Schema is the JSON schema of the arguments object.
	Schema() json.RawMessage
	// Call runs the tool on a JSON arguments object. An error is a failed call (bad arguments,
	// limit exceeded, sandbox failure); its message is returned to the model.
	Call(ctx context.Context, args json.RawMessage) (string, error)
}
