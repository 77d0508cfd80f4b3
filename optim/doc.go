// Package optim updates the flat parameter slice of the built-in model: AdamW with decoupled
// weight decay, a linear-warmup + cosine-decay learning-rate schedule, and global gradient-norm
// clipping. The AdamW inner loop is kernels.AdamW; this package owns the state (moments and step
// count), which it can export and restore for checkpoints.
//
// It does not know about tensors or names: callers describe which ranges of the slice take
// weight decay with Segments (learn.DecaySegments gives the usual split).
package optim
