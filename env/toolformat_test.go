package env

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/tool"
	"github.com/agentrl/agentrl/traj"
)

// TestSetToolFormat: with a model's own tool-call format the wrapper parses that format, leaves
// the system prompt alone and answers with bare results; Hermes keeps its behaviour.
func TestSetToolFormat(t *testing.T) {
	ctx := context.Background()
	if SetToolFormat(&echoEnv{}, tool.Mistral) {
		t.Fatal("an environment without tools reported a tool wrapper")
	}
	e := WithTurnLimit(WithTools(&echoEnv{}, []tool.Tool{echoTool("look")}, ToolLimits{}), 8)
	if !SetToolFormat(e, tool.Mistral) {
		t.Fatal("the tool wrapper under the turn limit was not found")
	}
	obs, err := e.Reset(ctx, 1)
	if err != nil || obs.System != "Be brief." {
		t.Fatalf("system prompt %q (%v): the template shows the tools", obs.System, err)
	}
	tr, err := e.Step(ctx, `[TOOL_CALLS] [{"name": "look", "arguments": {"q": 1}}, {"name": "look", "arguments": {"fail": "no"}}]`)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Role != traj.RoleTool || tr.Observation != `look:{"q": 1}`+"\nerror: no" || len(tr.ToolCalls) != 2 {
		t.Fatalf("transition %+v", tr)
	}
	// A Hermes block is not a call in Mistral's format: it is the agent's answer.
	tr, err = e.Step(ctx, `<tool_call>{"name": "look", "arguments": {}}</tool_call>`)
	if err != nil || tr.Role != traj.RoleEnv || !strings.HasPrefix(tr.Observation, "echo:") {
		t.Fatalf("hermes text under mistral: %+v %v", tr, err)
	}

	// Hermes through a template: the same parser, bare results, no description; nil restores
	// agentrl's own behaviour.
	h := WithTools(&echoEnv{}, []tool.Tool{echoTool("look")}, ToolLimits{})
	SetToolFormat(h, tool.Hermes)
	obs, _ = h.Reset(ctx, 1)
	if obs.System != "Be brief." {
		t.Fatalf("hermes template: system prompt %q", obs.System)
	}
	tr, err = h.Step(ctx, `<tool_call>{"name": "look", "arguments": {}}</tool_call>`)
	if err != nil || tr.Observation != "look:{}" {
		t.Fatalf("hermes template: %+v %v", tr, err)
	}
	SetToolFormat(h, nil)
	obs, _ = h.Reset(ctx, 1)
	if !strings.Contains(obs.System, "look(") {
		t.Fatalf("nil: the system prompt lost the tool descriptions: %q", obs.System)
	}
	tr, err = h.Step(ctx, `<tool_call>{"name": "look", "arguments": {}}</tool_call>`)
	if err != nil || tr.Observation != "<tool_response>look:{}</tool_response>" {
		t.Fatalf("nil: %+v %v", tr, err)
	}

	schemas, err := ToolSchemas([]tool.Tool{echoTool("look")})
	if err != nil || len(schemas) != 1 || string(schemas[0]) != `{"type":"function","function":{"name":"look","description":"test tool look","parameters":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"number"}}}}}` {
		t.Fatalf("schemas %s %v", schemas, err)
	}
}
