package bench

import "time"

// cpuTime is zero on Windows (no getrusage): figures per CPU second read as unavailable there.
func cpuTime() time.Duration { return 0 }
