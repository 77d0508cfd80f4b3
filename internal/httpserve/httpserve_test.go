package httpserve

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
	} {
		if got := Loopback(host); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", host, got, want)
		}
	}
}

// A request in flight when ctx ends finishes; Run then returns nil and the listener is closed.
func TestRunShutsDownGracefully(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		if r.Context().Err() != nil {
			t.Error("the request's context ended with the server's")
		}
		io.WriteString(w, "done")
	})}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, hs, ln, 10*time.Second) }()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-started
	cancel()
	time.Sleep(20 * time.Millisecond) // the shutdown is under way with the request in flight
	close(release)
	if b := <-got; b != "done" {
		t.Fatalf("request in flight got %q", b)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run after ctx ended: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("still accepting after Run returned")
	}
}

func TestCheckKey(t *testing.T) {
	for _, c := range []struct {
		key string
		ok  bool
	}{{"", true}, {"sekrit", true}, {"a-b_c.d", true}, {" ", false}, {"   ", false}, {"\t", false}, {" sekrit", false}, {"sek rit", false}, {"sekrit\n", false}, {"\u00a0", false}} {
		if err := CheckKey(c.key); (err == nil) != c.ok {
			t.Errorf("CheckKey(%q) = %v", c.key, err)
		}
	}
}
