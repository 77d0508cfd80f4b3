package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentrl/agentrl/tool"
)

// Tool is one tool of an MCP server. Call sends tools/call and returns the text content
// joined by newlines. A result the server flags isError, and a JSON-RPC "invalid params"
// rejection, come back as ordinary errors the model sees; a broken connection, a dead server
// or any other protocol failure wraps tool.ErrInfra.
type Tool struct {
	client      *Client
	remote      string // the server's name for the tool
	name        string // Prefix + remote
	description string
	schema      json.RawMessage
	maxArg      int
	maxResult   int
}

// Name implements tool.Tool.
func (t *Tool) Name() string { return t.name }

// Description implements tool.Tool.
func (t *Tool) Description() string { return t.description }

// Schema implements tool.Tool; it is the server's input schema as listed.
func (t *Tool) Schema() json.RawMessage { return t.schema }

// Call implements tool.Tool.
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (string, error) {
	if len(args) > t.maxArg {
		return "", fmt.Errorf("mcp %s: arguments are %d bytes, limit %d", t.name, len(args), t.maxArg)
	}
	trimmed := strings.TrimSpace(string(args))
	if trimmed == "" || trimmed == "null" {
		args = json.RawMessage("{}")
	} else if !json.Valid(args) || trimmed[0] != '{' {
		return "", fmt.Errorf("mcp %s: arguments must be a JSON object", t.name)
	}
	session, err := t.client.current(ctx)
	if err != nil {
		return "", fmt.Errorf("mcp %s: %w", t.name, err)
	}
	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: args})
	if err != nil {
		var wire *jsonrpc.Error
		if ctx.Err() == nil && (!errors.As(err, &wire) || wire.Code == codeRejectedByTransport) {
			// Not an answer from the server: the connection or the server failed.
			t.client.failed(session)
		}
		return "", t.classify(ctx, err)
	}
	text := tool.TruncateText(joinContent(res.Content), t.maxResult)
	if res.IsError {
		if text == "" {
			text = "the tool reported an error"
		}
		return "", fmt.Errorf("mcp %s: %s", t.name, text)
	}
	return text, nil
}

// codeRejectedByTransport is the code the MCP SDK gives a request its transport could not
// deliver (over HTTP: the server did not answer, or answered with an HTTP error).
const codeRejectedByTransport = -32005

// classify separates what the model caused (arguments the server rejected as invalid) from
// failures of the connection or the server, which are infrastructure errors.
func (t *Tool) classify(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("mcp %s: %w", t.name, ctx.Err())
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		// -32768..-32000 is reserved for the protocol and its implementations (closing,
		// parse errors, internal errors); codes outside it belong to the server's own tools.
		if wire.Code == jsonrpc.CodeInvalidParams || wire.Code > -32000 || wire.Code < -32768 {
			return fmt.Errorf("mcp %s: %s", t.name, wire.Message)
		}
	}
	return tool.Infra(fmt.Errorf("mcp %s: %w", t.name, err))
}

// joinContent renders a result's content blocks as text: text as is, other kinds as a short
// placeholder the model can read.
func joinContent(content []sdk.Content) string {
	parts := make([]string, 0, len(content))
	for _, c := range content {
		switch x := c.(type) {
		case *sdk.TextContent:
			parts = append(parts, x.Text)
		case *sdk.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", x.MIMEType, len(x.Data)))
		case *sdk.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", x.MIMEType, len(x.Data)))
		case *sdk.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s]", x.URI))
		case *sdk.EmbeddedResource:
			if x.Resource != nil && x.Resource.Text != "" {
				parts = append(parts, x.Resource.Text)
			} else if x.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s]", x.Resource.URI))
			}
		default:
			parts = append(parts, fmt.Sprintf("[%T]", c))
		}
	}
	return strings.Join(parts, "\n")
}
