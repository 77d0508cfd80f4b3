package tokenizer_test

import (
	"fmt"

	"github.com/agentrl/agentrl/tokenizer"
)

func Example() {
	corpus := []string{
		"What is 1234 + 5678? The answer is 6912.",
		"<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1234 + 5678\"}}</tool_call>",
		"The answer is 42. The answer is 17. What is the answer?",
	}
	tok, err := tokenizer.Train(corpus, tokenizer.DefaultTrainOptions(300))
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("The answer is 6912.<|im_end|>")
	fmt.Println(len(ids), ids[len(ids)-1] == tok.EndOfTurn())
	fmt.Printf("%q\n", tok.Decode(ids))
	fmt.Printf("%q\n", tok.Decode(tok.EncodePrompt("", "What is 2 + 2?")))
	// Output:
	// 10 true
	// "The answer is 6912.<|im_end|>"
	// "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
}
