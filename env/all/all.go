// Package all registers every built-in environment. Import it for its side effect:
//
//	import _ "github.com/agentrl/agentrl/env/all"
package all

import (
	_ "github.com/agentrl/agentrl/env/calc"
	_ "github.com/agentrl/agentrl/env/code"
	_ "github.com/agentrl/agentrl/env/maze"
	_ "github.com/agentrl/agentrl/env/search"
)
