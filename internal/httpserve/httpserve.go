// Package httpserve holds what the project's HTTP servers (agentrl serve, env serve, the
// dashboard) share: which listen addresses are this machine's alone, and serving until a context
// ends with a graceful shutdown. It holds no handlers and no policy on keys.
package httpserve

import (
	"context"
	"net"
	"net/http"
	"time"
)

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
