package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/agentrl/agentrl/model"
	"github.com/goccy/go-yaml"
)

// A run with init takes its model from the checkpoint's config.json: the model block may be
// absent, or name only settings the checkpoint has (a setting at its zero value is unset). The
// run directory's config.yaml then holds the whole model taken.

// ModelPending reports whether the model block still waits for the init checkpoint's
// architecture (TakeModel): until then the checks that need the model's shape wait too.
func (c *Config) ModelPending() bool { return c.Init != "" && !c.modelTaken }

// TakeModel makes the model block the init checkpoint's architecture from (its config.json, as
// checkpoint.ReadConfig reads it). A setting the block states — nonzero, or named in the file or
// by --set even at its zero value (tie_embeddings: false) — with another value than the
// checkpoint's is refused, naming the key and both values; the vocabulary is the checkpoint's
// and never a setting.
func (c *Config) TakeModel(from model.Config) error {
	var errs []error
	for _, k := range modelKeys(c.Model, from, c.modelNamed) {
		errs = append(errs, fmt.Errorf("model.%s: the config says %s but init %s has %s (remove the setting to take the checkpoint's)", k.key, k.mine, c.Init, k.theirs))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	from.Vocab = 0
	c.Model = from
	c.modelTaken = true
	return nil
}

type modelConflict struct{ key, mine, theirs string }

// modelKeys lists the settings mine states (nonzero, or a top-level key in named) with another
// value than from's, by their YAML keys (nested ones dotted: rope_scaling.factor).
func modelKeys(mine, from model.Config, named map[string]bool) []modelConflict {
	var out []modelConflict
	var walk func(prefix string, a, b reflect.Value, stated bool)
	walk = func(prefix string, a, b reflect.Value, stated bool) {
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			av, bv := a.Field(i), b.Field(i)
			here := stated || (prefix == "" && named[name])
			if f.Type.Kind() == reflect.Struct {
				walk(prefix+name+".", av, bv, here)
				continue
			}
			if (av.IsZero() && !here) || av.Equal(bv) {
				continue
			}
			out = append(out, modelConflict{prefix + name, fmt.Sprint(av.Interface()), fmt.Sprint(bv.Interface())})
		}
	}
	walk("", reflect.ValueOf(mine), reflect.ValueOf(from), false)
	return out
}

// unsetDefaults clears the model settings of c that the overrides in sets do not name: with
// init, a preset's model block (def) is a default the checkpoint replaces, not a statement of
// the user's; the settings given with --set stay and are checked against the checkpoint (after
// a whole "model=…", the block is all the user's).
func (c *Config) unsetDefaults(def model.Config, sets []string) {
	named := map[string]bool{}
	for _, s := range sets {
		key, _, _ := strings.Cut(s, "=")
		if key == "model" {
			return
		}
		if rest, ok := strings.CutPrefix(key, "model."); ok {
			top, _, _ := strings.Cut(rest, ".")
			named[top] = true
		}
	}
	a, d := reflect.ValueOf(&c.Model).Elem(), reflect.ValueOf(def)
	t := a.Type()
	for i := range a.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if f := a.Field(i); f.CanSet() && !named[name] && f.Equal(d.Field(i)) {
			f.SetZero()
		}
	}
}

// namedModelKeys lists the keys of the model block of the YAML document data (none when it has
// none or is not a mapping; decodeYAML has read it strictly already).
func namedModelKeys(data []byte) map[string]bool {
	var doc struct {
		Model map[string]any `yaml:"model"`
	}
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	named := map[string]bool{}
	for k := range doc.Model {
		named[k] = true
	}
	return named
}

// setModelKeys adds to named the model settings that the overrides in sets name: model.KEY, or
// the keys of a whole model={…}.
func setModelKeys(named map[string]bool, sets []string) map[string]bool {
	out := map[string]bool{}
	for k := range named {
		out[k] = true
	}
	for _, s := range sets {
		key, val, _ := strings.Cut(s, "=")
		if rest, ok := strings.CutPrefix(key, "model."); ok {
			top, _, _ := strings.Cut(rest, ".")
			out[top] = true
		} else if key == "model" {
			v, err := parseSetValue(val)
			if m, ok := v.(map[string]any); err == nil && ok {
				for k := range m {
					out[k] = true
				}
			}
		}
	}
	return out
}
