package remote

import (
	"net/http/httptest"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/all"
	"github.com/agentrl/agentrl/env/envtest"
)

// remotePair serves local on an in-process HTTP server and returns the spec of its clients, with
// the local expert and corpus (they need the task generator, which stays on the server side).
func remotePair(t *testing.T, local env.Spec) env.Spec {
	t.Helper()
	// No pooled environments: the suite counts goroutines, and an idle pooled env may hold some.
	srv, err := NewServer(local, ServerOptions{MaxIdleEnvs: -1})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		srv.Close()
	})
	spec, err := Spec(hs.URL, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != local.Name || spec.Train != local.Train || spec.Heldout != local.Heldout {
		t.Fatalf("remote spec %+v does not describe %s", spec, local.Name)
	}
	spec.Expert, spec.Corpus = local.Expert, local.Corpus
	return spec
}

// TestSuiteThroughRemote runs the shared environment suite through the HTTP pair.
func TestSuiteThroughRemote(t *testing.T) {
	envtest.Run(t, remotePair(t, guessSpec(nil, nil, nil)))
}

// TestRegisteredThroughRemote runs the suite through the HTTP pair for every built-in environment.
func TestRegisteredThroughRemote(t *testing.T) {
	builtins := all.Builtins()
	names := builtins.Names()
	if len(names) == 0 {
		t.Fatal("env/all registered no environments")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			local, err := builtins.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			envtest.Run(t, remotePair(t, local))
		})
	}
}
