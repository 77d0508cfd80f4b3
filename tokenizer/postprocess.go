package tokenizer

import (
	"encoding/json"
	"fmt"
)

// specialsTemplate is what a post-processor adds around a single sequence when special tokens are
// requested (Hugging Face's add_special_tokens=True): ids before and after it.
type specialsTemplate struct {
	prefix, suffix []int32
}

// parsePostProcessor reads the ids a post-processor adds to a single sequence. ByteLevel only
// adjusts offsets; TemplateProcessing, BertProcessing and RobertaProcessing add tokens; a Sequence
// combines them.
func parsePostProcessor(raw json.RawMessage, depth int) (specialsTemplate, error) {
	var tpl specialsTemplate
	if isNull(raw) {
		return tpl, nil
	}
	if depth > 16 {
		return tpl, fmt.Errorf("post-processor Sequences nested too deeply")
	}
	typ, err := typeOf(raw)
	if err != nil {
		return tpl, err
	}
	switch typ {
	case "ByteLevel":
		return tpl, checkKeys(raw, typ, "type", "add_prefix_space", "trim_offsets", "use_regex")
	case "Sequence":
		if err := checkKeys(raw, typ, "type", "processors"); err != nil {
			return tpl, err
		}
		var s struct {
			List []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return tpl, err
		}
		for i, r := range s.List {
			sub, err := parsePostProcessor(r, depth+1)
			if err != nil {
				return tpl, fmt.Errorf("type Sequence[%d]: %w", i, err)
			}
			// Each processor wraps the output of the previous one.
			tpl.prefix = append(append([]int32{}, sub.prefix...), tpl.prefix...)
			tpl.suffix = append(tpl.suffix, sub.suffix...)
		}
		return tpl, nil
	case "BertProcessing", "RobertaProcessing":
		keys := []string{"type", "sep", "cls"}
		if typ == "RobertaProcessing" {
			keys = append(keys, "trim_offsets", "add_prefix_space")
		}
		if err := checkKeys(raw, typ, keys...); err != nil {
			return tpl, err
		}
		var p struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return tpl, err
		}
		var sep, cls int32
		if err := json.Unmarshal(p.Sep[1], &sep); err != nil {
			return tpl, fmt.Errorf("%s: sep: %w", typ, err)
		}
		if err := json.Unmarshal(p.Cls[1], &cls); err != nil {
			return tpl, fmt.Errorf("%s: cls: %w", typ, err)
		}
		return specialsTemplate{prefix: []int32{cls}, suffix: []int32{sep}}, nil
	case "TemplateProcessing":
		if err := checkKeys(raw, typ, "type", "single", "pair", "special_tokens"); err != nil {
			return tpl, err
		}
		var p struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			Specials map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return tpl, fmt.Errorf("TemplateProcessing: %w", err)
		}
		seen := false
		for _, piece := range p.Single {
			switch {
			case piece.Sequence != nil && piece.SpecialToken == nil:
				if seen || piece.Sequence.ID != "A" {
					return tpl, fmt.Errorf("TemplateProcessing: single must hold sequence A once")
				}
				seen = true
			case piece.SpecialToken != nil && piece.Sequence == nil:
				sp, ok := p.Specials[piece.SpecialToken.ID]
				if !ok {
					return tpl, fmt.Errorf("TemplateProcessing: special token %q is not in special_tokens", piece.SpecialToken.ID)
				}
				if seen {
					tpl.suffix = append(tpl.suffix, sp.IDs...)
				} else {
					tpl.prefix = append(tpl.prefix, sp.IDs...)
				}
			default:
				return tpl, fmt.Errorf("TemplateProcessing: a piece of single is neither SpecialToken nor Sequence")
			}
		}
		if !seen {
			return tpl, fmt.Errorf("TemplateProcessing: single does not hold sequence A")
		}
		return tpl, nil
	case "":
		return tpl, fmt.Errorf("post-processor without a type")
	}
	return tpl, fmt.Errorf("type %q is not supported (ByteLevel, TemplateProcessing, BertProcessing, RobertaProcessing, Sequence)", typ)
}
