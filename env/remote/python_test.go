package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentrl/agentrl/env"
	"github.com/agentrl/agentrl/env/envtest"
	"github.com/agentrl/agentrl/env/remote"
	"github.com/agentrl/agentrl/env/remote/remotetest"
)

// TestPythonReferenceSuite runs the shared environment suite against the Python reference
// server through a pool: its expert (POST /expert), tools from its metadata, its error answers.
func TestPythonReferenceSuite(t *testing.T) {
	u := remotetest.StartArith(t)
	p, err := remote.OpenPool(context.Background(), "arith", remote.PoolConfig{URL: u}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	md := p.Metadata()
	if !md.Expert || len(md.Tools) != 1 || md.Tools[0].Name != "calculator" {
		t.Fatalf("metadata %+v", md)
	}
	spec := p.Spec()
	suite := spec
	suite.New = func() (env.Env, error) { // see TestPoolSuite: the pool's idle connections
		e, err := spec.New()
		return closeIdle{e, p}, err
	}
	envtest.Run(t, suite)
	if f := p.Failures(); len(f) != 0 {
		t.Errorf("failed calls %v, want none", f)
	}
}

type closeIdle struct {
	env.Env
	p *remote.Pool
}

func (c closeIdle) Close() error {
	err := c.Env.(env.Closer).Close()
	c.p.Close()
	return err
}

// TestPythonReferenceAPIKey: the reference server started with a key refuses a pool without it.
func TestPythonReferenceAPIKey(t *testing.T) {
	t.Setenv("ARITH_TEST_KEY", "k3y")
	u := remotetest.StartArith(t, "--api-key-env", "ARITH_TEST_KEY")
	p, err := remote.OpenPool(context.Background(), "arith", remote.PoolConfig{URL: u, APIKey: "${ARITH_TEST_KEY}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	_, err = remote.OpenPool(context.Background(), "arith", remote.PoolConfig{URL: u}, nil)
	var re *remote.Error
	if !errors.As(err, &re) || re.Status != 401 || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("no key: %v", err)
	}
}
