package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrl/agentrl/env/all"
)

// A remote entry is decoded, validated without contacting its servers, and kept through the
// saved rendering; the first try (url beside name) is refused naming the key.
func TestRemoteEnvEntry(t *testing.T) {
	envs := all.Builtins()
	c, err := Load(envs, "", "", []string{
		"phases.sft.envs=[{name: myenv, weight: 1, remote: {url: 'http://127.0.0.1:9000', replicas: ['http://127.0.0.1:9001'], api_key: '${MYENV_KEY}', timeout: 30s, max_sessions: 16}}]",
		"phases.rl.envs=[{name: myenv, weight: 1}, {name: calc, weight: 1}]",
	})
	if err != nil {
		t.Fatal(err)
	}
	defs := c.RemoteEnvs()
	d, ok := defs["myenv"]
	if len(defs) != 1 || !ok || d.Timeout != 30*time.Second || d.MaxSessions != 16 || len(d.URLs()) != 2 {
		t.Fatalf("remote envs %+v", defs)
	}
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Validate(envs); err != nil {
		t.Fatal(err)
	}
	if back.RemoteEnvs()["myenv"].APIKey != "${MYENV_KEY}" {
		t.Fatalf("the saved config lost the key reference:\n%s", data)
	}
	if _, err := Load(envs, "", "", []string{"phases.rl.envs=[{name: myenv, url: 'http://127.0.0.1:9000'}]"}); err == nil || !strings.Contains(err.Error(), "url") {
		t.Fatalf("url beside name: %v", err)
	}
}

func TestRemoteEnvEntryErrors(t *testing.T) {
	envs := all.Builtins()
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'http://a:1', timout: 1s}}]"}, "timout"},
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1, remote: {}}]"}, "remote.url"},
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'ftp://a'}}]"}, "http://host:port"},
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'http://a:1', api_key: sk-123}}]"}, "api_key"},
		{[]string{"phases.rl.envs=[{name: calc, weight: 1, remote: {url: 'http://a:1'}}]"}, "registered environment"},
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'http://a:1'}, difficulty: {levels: [1]}}]"}, "no difficulty levels"},
		{[]string{"phases.sft.envs=[{name: myenv, weight: 1, remote: {url: 'http://a:1'}}]",
			"phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'http://b:1'}}]"}, "defined differently"},
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1}]"}, "unknown environment"},
		{[]string{"phases.rl.envs=[{name: myenv, weight: 1, remote: {url: 'http://a:1', max_sessions: 100000}}]"}, "max_sessions"},
	} {
		_, err := Load(envs, "", "", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.sets, err, tc.want)
		}
	}
}

// A tasks entry decodes (held_out a fraction or a field), survives the saved rendering, and is
// refused when its file is missing or its block is wrong.
func TestTaskEnvEntry(t *testing.T) {
	envs := all.Builtins()
	path := t.TempDir() + "/d.jsonl"
	if err := os.WriteFile(path, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, held := range []string{"0.1", "split"} {
		c, err := Load(envs, "", "", []string{
			"phases.sft.envs=[{name: mytasks, weight: 1, tasks: {path: '" + path + "', prompt: '{q}', answer: a, split: {held_out: " + held + "}, verifier: exact}}]",
			"phases.rl.envs=[{name: mytasks, weight: 1}]",
		})
		if err != nil {
			t.Fatal(err)
		}
		data, _ := Encode(c)
		back, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := back.Validate(envs); err != nil {
			t.Fatalf("%s: %v\n%s", held, err, data)
		}
		if fmt.Sprint(back.TaskEnvs()["mytasks"].Split.HeldOut) != held {
			t.Fatalf("held_out %v after the round trip, want %s", back.TaskEnvs()["mytasks"].Split.HeldOut, held)
		}
	}
	for _, tc := range []struct{ entry, want string }{
		{"{name: t, weight: 1, tasks: {path: /nonexistent.jsonl, prompt: q, answer: a, split: {held_out: 0.1}, verifier: exact}}", "tasks.path"},
		{"{name: t, weight: 1, tasks: {path: '" + path + "', prompt: q, answer: a, split: {held_out: 0.1}, verifier: judge}}", "needs the judge block"},
		{"{name: t, weight: 1, tasks: {path: '" + path + "', prompt: q, answer: a, split: {held_out: 2}, verifier: exact}}", "held_out"},
		{"{name: t, weight: 1, tasks: {path: '" + path + "', prompt: q, answer: a, split: {held_out: 0.1}, verifier: exact, colour: red}}", "colour"},
		{"{name: t, weight: 1, remote: {url: 'http://a:1'}, tasks: {path: '" + path + "', prompt: q, answer: a, split: {held_out: 0.1}, verifier: exact}}", "not both"},
		{"{name: t, weight: 1, tasks: {path: '" + path + "', prompt: q, answer: a, split: {held_out: 0.1}, verifier: exact}, difficulty: {levels: [1]}}", "no levels"},
	} {
		_, err := Load(envs, "", "", []string{"phases.rl.envs=[" + tc.entry + "]"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.entry, err, tc.want)
		}
	}
}

// A dataset's relative path is the configuration file's folder's, whatever the working folder;
// one given by --set is the working folder's; both are kept absolute.
func TestTaskPathRelativeToConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "d.jsonl"), []byte(`{"q": "x", "a": "y"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	envs := all.Builtins()
	c, err := Load(envs, "", "", []string{
		"phases.sft.envs=[{name: mytasks, weight: 1, tasks: {path: '" + filepath.Join(dir, "d.jsonl") + "', prompt: q, answer: a, split: {held_out: 0.5}, verifier: exact}}]",
		"phases.rl.envs=[{name: mytasks, weight: 1}]",
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Phases[0].Envs[0].Tasks.Path = "d.jsonl"
	data, _ := Encode(c)
	cfgPath := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Load(envs, "", cfgPath, nil)
	if err != nil {
		t.Fatalf("d.jsonl beside the configuration: %v", err)
	}
	if got := back.TaskEnvs()["mytasks"].Path; got != filepath.Join(dir, "d.jsonl") {
		t.Fatalf("path %q", got)
	}
	t.Chdir(dir)
	set, err := Load(envs, "", "", []string{
		"phases.sft.envs=[{name: mytasks, weight: 1, tasks: {path: d.jsonl, prompt: q, answer: a, split: {held_out: 0.5}, verifier: exact}}]",
		"phases.rl.envs=[{name: mytasks, weight: 1}]",
	})
	if err != nil || !filepath.IsAbs(set.TaskEnvs()["mytasks"].Path) {
		t.Fatalf("a --set path: %v %+v", err, set.TaskEnvs())
	}
}
