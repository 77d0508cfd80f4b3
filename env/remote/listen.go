package remote

import (
	"context"
	"errors"
	"fmt"
	"github.com/agentrl/agentrl/internal/httpserve"
	"io"
	"log"
	"net"
	"net/http"
	"time"
)

// Listen opens a TCP listener on addr. Unless allowRemote is set, addr must name a loopback
// address ("127.0.0.1:8931", "[::1]:0", "localhost:8931"): the protocol has no authentication,
// and an empty host (":8931") would listen on every interface.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("remote: listen address %q: %w", addr, err)
	}
	if !allowRemote {
		if err := checkLoopback(host); err != nil {
			return nil, fmt.Errorf("remote: refusing to listen on %q: %w (pass allow-remote to serve other hosts)", addr, err)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remote: %w", err)
	}
	return ln, nil
}

func checkLoopback(host string) error {
	if host == "" {
		return errors.New("no host means every interface")
	}
	if httpserve.Loopback(host) {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("host %q is not an IP address or localhost", host)
	}
	return fmt.Errorf("%s is not a loopback address", ip)
}

// ShutdownGrace is how long Serve lets requests in flight finish after its context ends, before
// their environments are told to stop.
const ShutdownGrace = 5 * time.Second

// Serve answers requests on ln until ctx ends, then shuts down gracefully: it stops accepting,
// lets requests in flight finish (up to ShutdownGrace, then cancels them), and closes every
// session. It returns nil after a shutdown caused by ctx, or the error that stopped serving.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.ConnIdleTimeout,
		ErrorLog:          log.New(io.Discard, "", 0), // client hang-ups are not the server's news
	}
	if err := httpserve.Run(ctx, hs, ln, ShutdownGrace); err != nil {
		s.Close()
		return fmt.Errorf("remote: serve: %w", err)
	}
	return s.Close()
}
