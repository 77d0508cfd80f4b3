package learn

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestBackendConfigValidate(t *testing.T) {
	ok := []BackendConfig{
		{},
		{Backend: "builtin"},
		{Backend: "http", URL: "http://127.0.0.1:9000", Timeout: time.Minute},
		{Backend: "http", URL: "http://10.0.0.2:9000", Key: "${LEARNER_KEY}"},
		{Backend: "torch", Python: "/usr/bin/python3", Path: "learners/torch", Device: "cuda", BF16: true, MaxTokens: 8192, ActivationCheckpointing: true},
		{Backend: "torch", Python: "python3", Restart: 2},
		{Backend: "tinker", URL: "https://tinker.example", Key: "${TINKER_API_KEY}", BaseModel: "Qwen/Qwen3-4B-Instruct-2507", Rank: 32, Timeout: time.Minute},
		{Backend: "builtin", ProbeTolerance: &ProbeTolerance{BFloat16: ptr(0.5)}},
		{Backend: "http", URL: "http://127.0.0.1:9000", ProbeTolerance: &ProbeTolerance{Float32: ptr(1e-5), BFloat16: ptr(0.1)}},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []struct {
		c    BackendConfig
		want string
	}{
		{BackendConfig{Backend: "tinkr"}, "backend must be builtin, http, torch or tinker"},
		{BackendConfig{Backend: "tinker"}, "learner.url and learner.base_model are required"},
		{BackendConfig{Backend: "tinker", URL: "http://x:1", BaseModel: "m"}, "learner.rank"},
		{BackendConfig{Backend: "tinker", URL: "http://x:1", BaseModel: "m", Rank: 8, Python: "p"}, "settings of the torch backend"},
		{BackendConfig{Backend: "tinker", URL: "http://x:1", BaseModel: "m", Rank: 8, ProbeTolerance: &ProbeTolerance{Float32: ptr(1)}}, "probe_tolerance does nothing with backend tinker"},
		{BackendConfig{Backend: "http", URL: "http://x:1", Rank: 8}, "settings of the tinker backend"},
		{BackendConfig{BaseModel: "m"}, "settings of the tinker backend"},
		{BackendConfig{Backend: "builtin", Timeout: time.Second}, "do nothing with the builtin"},
		{BackendConfig{Python: "/usr/bin/python3"}, "do nothing with the builtin"},
		{BackendConfig{Backend: "http"}, "url is required"},
		{BackendConfig{Backend: "http", URL: "http://x:1", Python: "python3"}, "settings of the torch backend"},
		{BackendConfig{Backend: "http", URL: "http://x:1", Key: "s3cret"}, "${NAME}"},
		{BackendConfig{Backend: "torch"}, "python"},
		{BackendConfig{Backend: "http", URL: "http://x:1", ActivationCheckpointing: true}, "settings of the torch backend"},
		{BackendConfig{Backend: "torch", Python: "p", URL: "http://x:1"}, "url does nothing"},
		{BackendConfig{Backend: "torch", Python: "p", Device: "cpu", BF16: true}, "bf16"},
		{BackendConfig{Backend: "torch", Python: "p", MaxTokens: 1}, "max_tokens"},
		{BackendConfig{Backend: "http", URL: "http://x:1", Timeout: -time.Second}, "timeout"},
		{BackendConfig{ProbeTolerance: &ProbeTolerance{}}, "sets neither"},
		{BackendConfig{Backend: "http", URL: "http://x:1", Restart: 1}, "settings of the torch backend"},
		{BackendConfig{Backend: "torch", Python: "p", Restart: -1}, "restart must not be negative"},
		{BackendConfig{ProbeTolerance: &ProbeTolerance{Float32: ptr(0)}}, "probe_tolerance.float32 must be a finite number > 0"},
		{BackendConfig{ProbeTolerance: &ProbeTolerance{BFloat16: ptr(math.Inf(1))}}, "probe_tolerance.bfloat16"},
	}
	for _, b := range bad {
		err := b.c.Validate()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: err = %v, want one mentioning %q", b.c, err, b.want)
		}
	}
}

func ptr(x float64) *float64 { return &x }

// The sync probe's tolerance is the configured one per precision, the default otherwise.
func TestProbeTolerance(t *testing.T) {
	c := BackendConfig{ProbeTolerance: &ProbeTolerance{BFloat16: ptr(0.5)}}
	for _, x := range []struct {
		c    BackendConfig
		prec string
		want float64
	}{{BackendConfig{}, "float32", 1e-3}, {BackendConfig{}, "bfloat16", 0.25}, {BackendConfig{}, "float16", 0.25}, {c, "bfloat16", 0.5}, {c, "float32", 1e-3}} {
		if got := x.c.Tolerance(x.prec); got != x.want {
			t.Errorf("%+v: tolerance of %s %v, want %v", x.c.ProbeTolerance, x.prec, got, x.want)
		}
	}
}
