package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentrl/agentrl/chat"
	"github.com/agentrl/agentrl/tokenizer"
)

// TokenizeCmd prints the ids and pieces of a text, or of a conversation rendered with the
// tokenizer's own chat template: what the policy sees.
type TokenizeCmd struct {
	Tokenizer          string `required:"" type:"existingdir" help:"Tokenizer folder (tokenizer.json, tokenizer_config.json with its chat_template, or chat_template.jinja)."`
	Chat               string `type:"existingfile" help:"A conversation to render with the chat template: a JSON array of OpenAI-style messages, or {\"messages\": [...], \"tools\": [...]}."`
	Tools              string `type:"existingfile" help:"Tool schemas (a JSON array, OpenAI's function format) the template shows; with --chat."`
	NoGenerationPrompt bool   `help:"Render without the generation prompt that opens the assistant's turn; with --chat."`
	Text               string `arg:"" optional:"" help:"Text to tokenize as it is (special tokens' text becomes those tokens); read from stdin when neither it nor --chat is given."`
}

// Run loads the tokenizer, renders or reads the text and prints one line per token:
// position, id and the piece (the token's text, Go-quoted), then the count.
func (c *TokenizeCmd) Run(g *Globals) error {
	tok, err := tokenizer.Load(c.Tokenizer)
	if err != nil {
		return fmt.Errorf("tokenize: %w", err)
	}
	var text string
	switch {
	case c.Chat != "":
		if c.Text != "" {
			return errors.New("tokenize: give either a text or --chat, not both")
		}
		if text, err = c.render(); err != nil {
			return fmt.Errorf("tokenize: %w", err)
		}
		fmt.Fprintf(g.Stdout, "# rendered: %q\n", text)
	case c.Tools != "" || c.NoGenerationPrompt:
		return errors.New("tokenize: --tools and --no-generation-prompt apply to --chat")
	case c.Text != "":
		text = c.Text
	default:
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<20))
		if err != nil {
			return fmt.Errorf("tokenize: reading stdin: %w", err)
		}
		text = string(b)
	}
	ids := tok.Encode(text)
	for i, id := range ids {
		fmt.Fprintf(g.Stdout, "%d\t%d\t%q\n", i, id, tok.Decode([]int32{id}))
	}
	fmt.Fprintf(g.Stdout, "# %d tokens\n", len(ids))
	return nil
}

func (c *TokenizeCmd) render() (string, error) {
	data, err := os.ReadFile(c.Chat)
	if err != nil {
		return "", err
	}
	msgs, tools, err := chat.ParseMessages(data)
	if err != nil {
		return "", err
	}
	if c.Tools != "" {
		if tools != nil {
			return "", errors.New("tools are given both in --chat and --tools")
		}
		b, err := os.ReadFile(c.Tools)
		if err != nil {
			return "", err
		}
		if tools, err = chat.ParseTools(b); err != nil {
			return "", err
		}
	}
	tpl, err := chat.Load(c.Tokenizer, "", tools != nil)
	if err != nil {
		return "", err
	}
	return tpl.Apply(msgs, tools, !c.NoGenerationPrompt)
}
