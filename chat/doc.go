// Package chat renders a model's Hugging Face chat template (Jinja, with Jinja2's semantics as
// transformers' apply_chat_template uses them) and holds the per-episode Conversation that turns
// an agent's turns into exactly the tokens the template gives, appending only the tokens of each
// new observation.
//
// The template engine is this package's own: the subset of Jinja2 the chat templates of the
// model families in use need (Qwen2.5/3, Llama 2/3/3.1, Mistral, SmolLM, DeepSeek), with
// Python's value semantics (insertion-ordered dicts, json.dumps for tojson, str methods).
// Anything outside the subset is refused when the template is parsed, with its line; a render
// is bounded in steps, output and call depth, so no template hangs or exhausts the stack.
//
// It does not tokenize: a Conversation takes any tokenizer with Encode, Decode and a
// special-token lookup.
package chat
