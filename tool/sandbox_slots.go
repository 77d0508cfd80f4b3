package tool

import (
	"context"
	"fmt"
	"runtime"
)

// sandboxSlots bounds how many sandboxed interpreters run at once in this process. Thousands of
// episodes may be in flight, each able to call python; starting a process for every one at once
// would exhaust memory and process tables long before it made anything faster, so runs wait
// here for a slot (the wait counts against the caller's context, not the run's own timeout).
var sandboxSlots = make(chan struct{}, max(4, 2*runtime.NumCPU()))

func acquireSandbox(ctx context.Context) (release func(), err error) {
	select {
	case sandboxSlots <- struct{}{}:
		return func() { <-sandboxSlots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("python sandbox: waiting for a free slot: %w", ctx.Err())
	}
}
