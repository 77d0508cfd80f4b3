// Package mcp gives environments the tools of MCP (Model Context Protocol) servers. Client is a
// session with one server, over stdio or streamable HTTP, whose tools are tool.Tools; Config is
// the `mcp` block of a run configuration (which servers, and which of their tools each
// environment gets), and Connect turns it into a Toolbox that makes environments with those
// tools attached.
//
// It knows environments and tools, never the trainer: `agentrl eval` and `agentrl env serve`
// attach MCP tools without linking the learner.
package mcp
