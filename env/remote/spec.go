package remote

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentrl/agentrl/env"
)

// FetchMetadata asks the server at baseURL what it serves.
func FetchMetadata(ctx context.Context, baseURL string, opts ClientOptions) (Metadata, error) {
	c, err := Dial(baseURL, opts)
	if err != nil {
		return Metadata{}, err
	}
	defer c.Close()
	var md Metadata
	if err := c.call(ctx, "metadata", http.MethodGet, "/metadata", nil, &md); err != nil {
		return Metadata{}, err
	}
	if md.Protocol != ProtocolVersion {
		return Metadata{}, fmt.Errorf("remote env %s: %w: server speaks protocol %d, this client %d", baseURL, ErrProtocol, md.Protocol, ProtocolVersion)
	}
	return md, nil
}

// Spec fetches /metadata from baseURL (bounded by opts.Timeout) and returns a spec whose New
// dials the server. Expert and Corpus are nil: they need the task generator, which lives with the
// server; a caller holding the local spec of the same environment can copy them over.
func Spec(baseURL string, opts ClientOptions) (env.Spec, error) {
	return SpecContext(context.Background(), baseURL, opts)
}

// SpecContext is Spec under ctx.
func SpecContext(ctx context.Context, baseURL string, opts ClientOptions) (env.Spec, error) {
	md, err := FetchMetadata(ctx, baseURL, opts)
	if err != nil {
		return env.Spec{}, err
	}
	return env.Spec{
		Name:        md.Name,
		Description: md.Description,
		Train:       env.SeedRange{Lo: md.Train.Lo, Hi: md.Train.Hi},
		Heldout:     env.SeedRange{Lo: md.Heldout.Lo, Hi: md.Heldout.Hi},
		New: func() (env.Env, error) {
			c, err := Dial(baseURL, opts)
			if err != nil {
				return nil, err // not a typed nil inside the interface
			}
			return c, nil
		},
	}, nil
}
