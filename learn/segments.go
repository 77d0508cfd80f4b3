package learn

import (
	"github.com/agentrl/agentrl/model"
	"github.com/agentrl/agentrl/optim"
)

// DecaySegments tells AdamW which parts of p.Data get weight decay (model.NamedTensor.Decays),
// in storage order, with neighbouring tensors of the same kind merged into one segment.
func DecaySegments(p *model.Params) []optim.Segment { return decaySegments(p.Tensors()) }

// decaySegments is DecaySegments over tensors that tile one slice in order.
func decaySegments(tensors []model.NamedTensor) []optim.Segment {
	segs := make([]optim.Segment, 0, len(tensors))
	for _, t := range tensors {
		decay := t.Decays()
		if n := len(segs); n > 0 && segs[n-1].Decay == decay {
			segs[n-1].Len += len(t.Data)
			continue
		}
		segs = append(segs, optim.Segment{Off: t.Offset, Len: len(t.Data), Decay: decay})
	}
	return segs
}
