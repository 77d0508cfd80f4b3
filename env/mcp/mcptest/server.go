package mcptest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// EverythingServer returns node and the entry point of @modelcontextprotocol/server-everything
// that scripts/setup installs under scripts/peers, skipping the test when either is absent.
func EverythingServer(t testing.TB) (node, script string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: MCP stdio test against server-everything skipped")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for { // the module root holds go.mod and scripts/
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
	script = filepath.Join(dir, "scripts/peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	if _, err := os.Stat(script); err != nil {
		t.Skip("server-everything is not installed (run scripts/setup): MCP stdio test skipped")
	}
	return node, script
}

// StdioBlock is an mcp config block running server-everything through sh, which first writes its
// process id to $PIDFILE: a relative name, so the file lands in dir, which proves both env and
// dir reach the server. The server's echo tool attaches to test-mcp-echo as ev_echo.
func StdioBlock(t testing.TB, dir string) string {
	node, script := EverythingServer(t)
	return fmt.Sprintf(`mcp:
  servers:
  - name: everything
    command: /bin/sh
    args: ["-c", 'echo $$ > "$PIDFILE"; exec "$0" "$@"', %q, %q, stdio]
    env: {PIDFILE: server.pid}
    dir: %q
  envs:
    test-mcp-echo:
    - server: everything
      tools: [echo]
      prefix: ev_
`, node, script, dir)
}

// ServerPID reads the process id StdioBlock's server wrote in dir.
func ServerPID(t testing.TB, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "server.pid"))
	if err != nil {
		t.Fatalf("the server did not write its pid in dir (env or dir not applied): %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
