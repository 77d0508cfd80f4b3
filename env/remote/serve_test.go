package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestListenLoopbackOnly(t *testing.T) {
	cases := []struct {
		addr        string
		allowRemote bool
		ok          bool
	}{
		{"127.0.0.1:0", false, true},
		{"localhost:0", false, true},
		{":0", false, false},
		{"0.0.0.0:0", false, false},
		{"192.0.2.1:0", false, false},
		{"example.com:80", false, false},
		{"no-port", false, false},
		{"0.0.0.0:0", true, true},
	}
	for _, c := range cases {
		t.Run(c.addr, func(t *testing.T) {
			ln, err := Listen(c.addr, c.allowRemote)
			if (err == nil) != c.ok {
				t.Fatalf("Listen(%q, %v): %v", c.addr, c.allowRemote, err)
			}
			if err == nil {
				ln.Close()
			} else if !c.allowRemote && !strings.Contains(err.Error(), "refusing") && c.addr != "no-port" {
				t.Fatalf("error does not say it refused: %v", err)
			}
		})
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	srv, err := NewServer(guessSpec(nil, nil, nil), ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	spec, err := Spec(url, ClientOptions{})
	if err != nil || spec.Name != "guess" || spec.Heldout.Lo != 1000 {
		t.Fatalf("Spec: %+v %v", spec, err)
	}
	c, err := Dial(url, ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reset(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve after cancel: %v", err)
	}
	if srv.Sessions() != 0 {
		t.Fatalf("%d sessions after shutdown", srv.Sessions())
	}
	if _, err := c.Step(context.Background(), "1"); err == nil {
		t.Fatal("step after shutdown succeeded")
	}
	c.Close()
	if err := srv.Serve(context.Background(), ln); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("Serve on a closed listener: %v", err)
	}
}
