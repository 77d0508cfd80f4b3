package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env/all"
)

func TestChatBlock(t *testing.T) {
	_, good, write := loadFixture(t)
	jinja := write("mine.jinja", "{{ messages[0].content }}")
	n := 0
	withChat := func(block string) string {
		n++
		return write(fmt.Sprintf("chat%d.yaml", n), string(good)+"chat:\n"+block)
	}
	for _, c := range []loadCase{
		{name: "unknown key", path: withChat("  template: auto\n  tool_fromat: hermes\n"), want: "tool_fromat"},
		{name: "unknown format", path: withChat("  template: auto\n  tool_format: xml\n"), want: `tool_format "xml" must be auto or one of hermes, llama3, mistral`},
		{name: "missing file", path: withChat("  template: nowhere/x.jinja\n"), want: "nowhere/x.jinja"},
		{name: "directory", path: withChat("  template: " + filepath.Dir(jinja) + "/\n"), want: "is a directory"},
		{name: "chatml with a format", path: withChat("  template: chatml\n  tool_format: llama3\n"), want: "does nothing with template chatml"},
		{name: "chatml with vars", path: withChat("  template: chatml\n  vars: {enable_thinking: false}\n"), want: "vars do nothing"},
		{name: "reserved var", path: withChat("  template: auto\n  vars: {tools: []}\n"), want: `"tools" is set by the conversation`},
		{name: "set unknown", sets: []string{"chat.nope=1"}, want: "nope"},
	} {
		checkLoadErrors(t, []loadCase{c})
	}
	c, err := Load(all.Builtins(), "", withChat("  template: "+jinja+"\n  tool_format: mistral\n  vars: {enable_thinking: false, tag: x}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.ChatSettings()
	vars, err := cc.VarsJSON()
	if err != nil || cc.Template != jinja || cc.ToolFormat != "mistral" || string(vars) != `{"enable_thinking":false,"tag":"x"}` {
		t.Fatalf("%+v %s %v", cc, vars, err)
	}
	// The block round-trips through the run's saved config.
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil || back.ChatSettings().Template != jinja || !strings.Contains(string(data), "enable_thinking") {
		t.Fatalf("round trip: %v\n%s", err, data)
	}
	// Absent: auto and auto. Template only: tool_format auto.
	if cc := (&Config{}).ChatSettings(); cc.Template != ChatAuto || cc.ToolFormat != ChatAuto {
		t.Fatalf("defaults %+v", cc)
	}
	c, err = Load(all.Builtins(), "calc", "", []string{"chat.template=chatml"})
	if err != nil {
		t.Fatal(err)
	}
	if cc := c.ChatSettings(); cc.Template != ChatChatML || cc.ToolFormat != ChatAuto {
		t.Fatalf("--set chat.template: %+v", cc)
	}
	_ = os.Remove(jinja)
}
