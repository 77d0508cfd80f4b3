package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/agentrl/agentrl/model"
)

// A run with init takes its model from the checkpoint's config.json: the model block may be
// absent, or name only settings the checkpoint has (a setting at its zero value is unset). The
// run directory's config.yaml then holds the whole model taken.

// ModelPending reports whether the model block still waits for the init checkpoint's
// architecture (TakeModel): until then the checks that need the model's shape wait too.
func (c *Config) ModelPending() bool { return c.Init != "" && !c.modelTaken }

// TakeModel makes the model block the init checkpoint's architecture from (its config.json, as
// checkpoint.ReadConfig reads it). A setting the block names (nonzero) with another value than
// the checkpoint's is refused, naming the key and both values; the vocabulary is the
// checkpoint's and never a setting.
func (c *Config) TakeModel(from model.Config) error {
	var errs []error
	for _, k := range modelKeys(c.Model, from) {
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

// modelKeys lists the settings mine names (nonzero) with another value than from's, by their
// YAML keys (nested ones dotted: rope_scaling.factor).
func modelKeys(mine, from model.Config) []modelConflict {
	var out []modelConflict
	var walk func(prefix string, a, b reflect.Value)
	walk = func(prefix string, a, b reflect.Value) {
		t := a.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			av, bv := a.Field(i), b.Field(i)
			if f.Type.Kind() == reflect.Struct {
				walk(prefix+name+".", av, bv)
				continue
			}
			if av.IsZero() || av.Equal(bv) {
				continue
			}
			out = append(out, modelConflict{prefix + name, fmt.Sprint(av.Interface()), fmt.Sprint(bv.Interface())})
		}
	}
	walk("", reflect.ValueOf(mine), reflect.ValueOf(from))
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
