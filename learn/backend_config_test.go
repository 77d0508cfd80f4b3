package learn

import (
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
		{BackendConfig{Backend: "tinker"}, "backend must be"},
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
	}
	for _, b := range bad {
		err := b.c.Validate()
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%+v: err = %v, want one mentioning %q", b.c, err, b.want)
		}
	}
}
