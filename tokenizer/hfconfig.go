package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// chatConfig is what this package reads from tokenizer_config.json. raw keeps the whole file so
// that saving a loaded tokenizer writes back the keys it does not interpret.
type chatConfig struct {
	template string
	bos      string
	eos      string
	pad      string
	raw      map[string]json.RawMessage
}

// modelMaxLength is written as model_max_length: the longest sequence the project's models are
// configured for is far below it; it exists so that transformers does not warn.
const modelMaxLength = 131072

func defaultChatConfig() chatConfig {
	return chatConfig{template: chatMLTemplate, eos: ImEnd, pad: EndOfText}
}

// configJSON renders tokenizer_config.json: the loaded file with the interpreted keys refreshed,
// or a complete one in the layout transformers writes for ChatML models.
func (t *Tokenizer) configJSON() (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for k, v := range t.config.raw {
		out[k] = v
	}
	set := func(k string, v any) error {
		b, err := marshalNoEscape(v)
		if err != nil {
			return fmt.Errorf("tokenizer: encoding %s: %w", k, err)
		}
		out[k] = b
		return nil
	}
	nullable := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	if t.config.raw == nil {
		decoder := map[string]hfAddedToken{}
		var specials []string
		for _, a := range t.added {
			decoder[strconv.Itoa(int(a.id))] = a.hf()
			if a.special && a.content != t.config.eos && a.content != t.config.pad {
				specials = append(specials, a.content)
			}
		}
		defaults := []struct {
			k string
			v any
		}{
			{"add_bos_token", false},
			{"add_prefix_space", t.pre.addPrefixSpace},
			{"added_tokens_decoder", decoder},
			{"additional_special_tokens", specials},
			{"bos_token", nil},
			{"clean_up_tokenization_spaces", false},
			{"errors", "replace"},
			{"model_max_length", modelMaxLength},
			{"split_special_tokens", false},
			{"tokenizer_class", "PreTrainedTokenizerFast"},
			{"unk_token", nullable(t.unkToken)},
		}
		for _, d := range defaults {
			if err := set(d.k, d.v); err != nil {
				return nil, err
			}
		}
	}
	if err := set("chat_template", t.config.template); err != nil {
		return nil, err
	}
	if err := set("eos_token", nullable(t.config.eos)); err != nil {
		return nil, err
	}
	if err := set("pad_token", nullable(t.config.pad)); err != nil {
		return nil, err
	}
	return out, nil
}

// parseConfig reads tokenizer_config.json. A chat template given as a list of named templates
// (the newer transformers form) contributes the one named "default".
func parseConfig(data []byte) (chatConfig, error) {
	var c chatConfig
	if err := json.Unmarshal(data, &c.raw); err != nil {
		return c, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	if c.raw == nil {
		return c, fmt.Errorf("tokenizer_config.json: top level is not an object")
	}
	if v, ok := c.raw["chat_template"]; ok && string(v) != "null" {
		var s string
		if err := json.Unmarshal(v, &s); err == nil {
			c.template = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(v, &named); err != nil {
				return c, fmt.Errorf("tokenizer_config.json: chat_template is neither a string nor a list of named templates")
			}
			for _, n := range named {
				if n.Name == "default" {
					c.template = n.Template
				}
			}
			if c.template == "" {
				return c, fmt.Errorf("tokenizer_config.json: chat_template list has no template named \"default\"")
			}
		}
	}
	var err error
	if c.bos, err = tokenField(c.raw, "bos_token"); err != nil {
		return c, err
	}
	if c.eos, err = tokenField(c.raw, "eos_token"); err != nil {
		return c, err
	}
	if c.pad, err = tokenField(c.raw, "pad_token"); err != nil {
		return c, err
	}
	return c, nil
}

// tokenField reads a special-token field, which transformers writes as a string, as an object
// with a "content" key, or as null.
func tokenField(raw map[string]json.RawMessage, key string) (string, error) {
	v, ok := raw[key]
	if !ok || string(v) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(v, &obj); err != nil || obj.Content == "" {
		return "", fmt.Errorf("tokenizer_config.json: %s is neither a string nor an object with content", key)
	}
	return obj.Content, nil
}
