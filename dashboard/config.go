package dashboard

import (
	"fmt"
	"os"
	"sort"
	"strconv"

	"github.com/goccy/go-yaml"
)

// flatConfig reads a run's resolved config.yaml as dotted keys ("phases.rl.rl.group_size") and
// their values printed as YAML scalars. A list of maps is flattened item by item, each named by
// its name field when every item has a distinct one (phases.rl…, phases.sft…), else by its index
// (….0, ….1); any other list is one value.
func flatConfig(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root any
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]string{}
	flatten("", root, out)
	return out, nil
}

func flatten(prefix string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, x, out)
		}
	case []any:
		if keys := itemKeys(v); keys != nil {
			for i, x := range v {
				key := keys[i]
				if prefix != "" {
					key = prefix + "." + key
				}
				flatten(key, x, out)
			}
			return
		}
		b, err := yaml.MarshalWithOptions(v, yaml.Flow(true))
		if err != nil {
			out[prefix] = fmt.Sprint(v)
			return
		}
		out[prefix] = string(trimNL(b))
	case nil:
		out[prefix] = "null"
	default:
		out[prefix] = fmt.Sprint(v)
	}
}

// itemKeys names the items of a list of maps by their name field, or by their index when an item
// has none or two share one; nil when the list is not (only) of maps.
func itemKeys(list []any) []string {
	if len(list) == 0 {
		return nil
	}
	keys := make([]string, len(list))
	seen := map[string]bool{}
	named := true
	for i, x := range list {
		m, ok := x.(map[string]any)
		if !ok {
			return nil
		}
		name, ok := m["name"].(string)
		if !ok || name == "" || seen[name] {
			named = false
		}
		seen[name] = true
		keys[i] = name
	}
	if !named {
		for i := range keys {
			keys[i] = strconv.Itoa(i)
		}
	}
	return keys
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// configDiff is one config key on which the compared runs differ, with each run's value ("" when
// a run lacks the key).
type configDiff struct {
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

// diffConfigs lists the keys whose values differ between the configs, sorted; the run name and
// directory are left out (they always differ).
func diffConfigs(cfgs []map[string]string) []configDiff {
	keys := map[string]bool{}
	for _, c := range cfgs {
		for k := range c {
			keys[k] = true
		}
	}
	var out []configDiff
	for k := range keys {
		if k == "name" || k == "runs_dir" {
			continue
		}
		vals := make([]string, len(cfgs))
		same := true
		for i, c := range cfgs {
			vals[i] = c[k]
			if vals[i] != vals[0] {
				same = false
			}
		}
		if !same {
			out = append(out, configDiff{Key: k, Values: vals})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// thresholds are the monitor's limits from the run's config, keyed by the metric they bound.
type threshold struct {
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Kind   string  `json:"kind"` // "min" or "max"
	Name   string  `json:"name"` // the config key
}

func monitorThresholds(cfg map[string]string) []threshold {
	var out []threshold
	for _, t := range []struct{ key, metric, kind string }{
		{"monitor.min_entropy", "explore/entropy", "min"},
		{"monitor.max_zero_var_share", "signal/zero_var_share", "max"},
		{"monitor.max_kl", "shift/behaviour_kl", "max"},
		{"monitor.max_latency_bias", "async/latency_bias", "max"}, // 0: off, no line
	} {
		if s, ok := cfg[t.key]; ok {
			if v, err := strconv.ParseFloat(s, 64); err == nil && (v != 0 || t.key != "monitor.max_latency_bias") {
				out = append(out, threshold{Metric: t.metric, Value: v, Kind: t.kind, Name: t.key})
			}
		}
	}
	return out
}
