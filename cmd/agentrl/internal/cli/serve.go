package cli

import (
	"fmt"
	"net"
	"time"

	"github.com/agentrl/agentrl/hub"
	"github.com/agentrl/agentrl/infer/serve"
	"github.com/agentrl/agentrl/internal/httpserve"
)

// ServeCmd serves a checkpoint as an OpenAI-compatible HTTP server.
type ServeCmd struct {
	Checkpoint string `help:"Checkpoint folder (model.safetensors, config.json, tokenizer.json), or hf:ORG/NAME[@REVISION] to download from the Hugging Face Hub (docs/hub.md)." required:"" placeholder:"DIR"`
	Adapter    string `help:"A LoRA adapter folder in PEFT's format (adapter_config.json, adapter_model.safetensors) to serve on the --checkpoint base; an adapter for another base is refused." type:"existingdir" placeholder:"DIR"`
	Addr       string `default:"127.0.0.1:8000" help:"Listen address. A non-loopback address needs an API key or --insecure."`
	APIKey     string `name:"api-key" env:"AGENTRL_API_KEY" help:"Bearer key required on /v1 and /agentrl routes (weight updates are disabled without one)." placeholder:"KEY"`
	Insecure   bool   `help:"Allow a non-loopback address without an API key: anyone who can connect may generate."`
	ModelName  string `default:"agentrl" help:"The model id clients name."`
	Slots      int    `default:"32" help:"Sequences decoded together (continuous batching across every client)."`
	MaxLen     int    `help:"Most tokens (prompt + completion) of one sequence (0: the model's max_position_embeddings)." default:"0"`
	// Not --version: the global flag of that name (print agentrl's version) would shadow it.
	Version        int32         `name:"policy-version" default:"0" help:"Policy version of the checkpoint's weights; weight updates that name no newer epoch must exceed it."`
	MaxBodyBytes   int64         `default:"8388608" help:"Largest generation request body; larger gets 413."`
	MaxWeightBytes int64         `default:"4294967296" help:"Largest pushed model.safetensors."`
	MaxPending     int           `default:"4096" help:"Most generations in flight (running or waiting); more get 429."`
	RequestTimeout time.Duration `default:"10m" help:"Bound on one request's generation."`
	ReadTimeout    time.Duration `default:"30s" help:"Bound on reading one request (headers and body; a pushed model.safetensors has 10 minutes)."`
	// The old reading of chat content, for clients that send control tokens as text on purpose.
	ChatSpecialTokens bool `help:"Read <|im_end|>, <|im_start|>, <tool_call>… written in user and tool content as control tokens (by default they are plain text, so a user cannot forge turn boundaries)."`
	ResponseStore     int  `default:"1024" help:"Responses kept in memory for previous_response_id (the oldest are evicted first)."`
}

// Run serves until g.Ctx ends, then shuts down gracefully.
func (c *ServeCmd) Run(g *Globals) error {
	if err := httpserve.CheckKey(c.APIKey); err != nil {
		return fmt.Errorf("serve: --api-key: %w", err)
	}
	if err := serve.CheckAddr(c.Addr, c.APIKey != "", c.Insecure); err != nil {
		return err
	}
	dir, err := folderOrHub(g, "serve: --checkpoint", c.Checkpoint, hub.Checkpoint)
	if err != nil {
		return err
	}
	opts := serve.Options{
		ModelName: c.ModelName, Slots: c.Slots, MaxLen: c.MaxLen, Version: c.Version, APIKey: c.APIKey,
		MaxBodyBytes: c.MaxBodyBytes, MaxWeightBytes: c.MaxWeightBytes, MaxPending: c.MaxPending, RequestTimeout: c.RequestTimeout,
		ReadTimeout: c.ReadTimeout, ChatSpecialTokens: c.ChatSpecialTokens, ResponseStore: c.ResponseStore,
	}
	var srv *serve.Server
	if c.Adapter != "" {
		name := ""
		if ref, err := hub.ParseRef(c.Checkpoint); err == nil {
			name = ref.Repo
		}
		srv, err = serve.OpenAdapter(dir, name, c.Adapter, opts)
	} else {
		srv, err = serve.Open(dir, opts)
	}
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		srv.Close()
		return fmt.Errorf("serve: %w", err)
	}
	auth := "no API key"
	if c.APIKey != "" {
		auth = "API key required"
	}
	if c.Adapter != "" {
		fmt.Fprintf(g.Stdout, "adapter %s on the base %s\n", c.Adapter, c.Checkpoint)
	}
	fmt.Fprintf(g.Stdout, "serving %s (version %d) as %q on http://%s (%s, %d slots)\n", c.Checkpoint, srv.Version(), c.ModelName, ln.Addr(), auth, c.Slots)
	if c.APIKey == "" && c.Insecure {
		fmt.Fprintln(g.Stderr, "serve: --insecure: anyone who can connect may generate; weight updates are disabled without an API key")
	}
	if err := srv.Serve(g.Ctx, ln); err != nil {
		return err
	}
	fmt.Fprintln(g.Stdout, "stopped serving")
	return nil
}
