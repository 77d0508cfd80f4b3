package code

import (
	"fmt"
	"strings"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/tool"
)

// Corpus returns n samples of the text an episode holds, for training a tokenizer: the system
// prompt with the tool description, the task, the expert's tool call, a tool response, the
// answer and the final observation. The tool response is what Python prints for the example
// (derived without running anything), and every third sample shows the buggy variant, so
// the vocabulary covers what policies write early in training too.
func Corpus(n int) []string {
	if n <= 0 {
		return nil
	}
	system := System + "\n" + env.DescribeTools([]tool.Tool{tool.NewPython(nil)})
	out := make([]string, n)
	for i := range n {
		p := newProblem(trainSeeds.Lo + int64(i))
		code := p.solution
		if i%3 == 2 {
			code = p.buggy
		}
		call, err := tryOutCall(p, code)
		if err != nil {
			// Marshalling a struct of strings cannot fail; keep the sample without the call.
			call = ""
		}
		var b strings.Builder
		b.WriteString(system + "\n" + p.prompt() + "\n" + call + "\n")
		b.WriteString("<tool_response>" + pyPrint(p.example.want) + "\n</tool_response>\n")
		b.WriteString(answerText(code) + "\n")
		b.WriteString(fmt.Sprintf("All %d tests passed.", len(p.cases)))
		out[i] = b.String()
	}
	return out
}

// pyPrint is what print(v) writes for a task value: strings bare, the rest as repr.
func pyPrint(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyRepr(v)
}
