package chat

import (
	"strings"
	"testing"
)

func TestLastMessage(t *testing.T) {
	tpl, err := Parse("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRenderer(tpl, stringTok{specials: qwenSpecials}, RendererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		text, want string
		ok         bool
	}{
		{"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n", "What is 2+2?", true},
		{"<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n<|im_start|>tool\n<tool_response>4</tool_response><|im_end|>\n<|im_start|>assistant\n", "<tool_response>4</tool_response>", true},
		{"<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n<|im_start|>user\nlast\nline<|im_end|>\n", "last\nline", true},
		{"no template here", "", false},
		{"<|im_start|>assistant\nhalf", "", false},
	} {
		got, ok := r.LastMessage(c.text)
		if got != c.want || ok != c.ok {
			t.Errorf("LastMessage(%q) = %q, %v; want %q, %v", c.text, got, ok, c.want, c.ok)
		}
	}
}

// FuzzLastMessage: any text, however it ends, gives a result or ok false, never a panic, and a
// found content is a part of the text.
func FuzzLastMessage(f *testing.F) {
	tpl, err := Parse("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
	if err != nil {
		f.Fatal(err)
	}
	r, err := NewRenderer(tpl, stringTok{specials: qwenSpecials}, RendererOptions{})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>tool\n<|im_end|>\n", "<|im_start|>user\n<|im_start|>user\n<|im_end|>\n", "\xff<|im_end|>\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if got, ok := r.LastMessage(text); ok && !strings.Contains(text, got) {
			t.Fatalf("content %q is not in %q", got, text)
		}
	})
}
