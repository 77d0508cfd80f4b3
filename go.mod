module github.com/agentrl/agentrl

go 1.26.0

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mmcloughlin/avo v0.5.0 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	golang.org/x/mod v0.33.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/tools v0.42.0 // indirect
)
