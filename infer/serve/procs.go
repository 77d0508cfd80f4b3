package serve

import (
	"os"
	"runtime"

	"github.com/agentrl/agentrl/model/kernels"
)

// ReserveNetworkProc prepares the process to answer HTTP while it decodes: it keeps the kernels'
// workers (kernels.SetWorkers) at the current GOMAXPROCS and raises GOMAXPROCS by one, so that
// a scheduler slot (P) is left for the network. The kernels' helpers spin between the parallel
// regions of a decode step and keep their Ps busy, and the Go runtime reads sockets that became
// ready only from an idle P, or every 10 ms from its monitor: with every P busy, requests and
// responses sat in the kernel until then, and the engine decoded the few sequences it held in
// steps of a few rows while the others were on the wire. It returns a function that restores
// both settings. Where the GOMAXPROCS environment variable fixes GOMAXPROCS it changes nothing.
// `agentrl serve` calls it at start; a program that embeds a Server may do the same.
func ReserveNetworkProc() (restore func()) {
	if os.Getenv("GOMAXPROCS") != "" {
		return func() {}
	}
	procs := runtime.GOMAXPROCS(0)
	prevWorkers := kernels.SetWorkers(procs)
	runtime.GOMAXPROCS(procs + 1)
	return func() {
		runtime.GOMAXPROCS(procs)
		kernels.SetWorkers(prevWorkers)
	}
}
