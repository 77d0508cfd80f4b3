// Package httpserve holds what the project's HTTP servers (agentrl serve, env serve, the
// dashboard) share: which listen addresses are this machine's alone, and serving until a context
// ends with a graceful shutdown, and what makes a usable access key. It holds no handlers.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
	"unicode"
)

// CheckKey refuses an access key that cannot protect anything: one that is empty or all spaces
// (a header or query parameter of spaces reads as no key at all to most clients), or that holds
// a space or control character anywhere (HTTP trims or mangles those). The empty string is "no
// key" to callers and is not checked here.
func CheckKey(key string) error {
	if key == "" {
		return nil
	}
	for _, r := range key {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			if len(key) == 1 || isBlank(key) {
				return errors.New("the key is blank (only spaces): give a real secret, or no key")
			}
			return errors.New("the key holds a space or control character: HTTP headers and query strings do not carry it intact")
		}
	}
	return nil
}

func isBlank(s string) bool {
	for _, r := range s {
		if !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// Loopback reports whether host reaches this machine only: "localhost" or a loopback IP.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Run serves hs on ln until ctx ends, then shuts down: it stops accepting, lets requests in
// flight finish for up to grace, then closes what is left. Request contexts descend from a base
// that is not ctx's child, so ctx ending does not cut requests in flight; the base is cancelled
// once the grace is over. Run returns nil after a shutdown caused by ctx, or the error that
// stopped serving. It sets hs.BaseContext.
func Run(ctx context.Context, hs *http.Server, ln net.Listener, grace time.Duration) error {
	base, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	hs.BaseContext = func(net.Listener) context.Context { return base }
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), grace)
	err := hs.Shutdown(shut)
	cancel()
	cancelBase()
	if err != nil {
		hs.Close()
	}
	<-errc // http.ErrServerClosed
	return nil
}
