// Package dashboard serves a local web page over run directories: curves from metrics.jsonl
// (read incrementally, so a run that is training shows live), the invariant panels with the
// monitor's thresholds and warnings, time per stage, runs overlaid with their config differences,
// a trajectory browser over trajectories.atrs, and the latest step as Prometheus metrics.
//
// It reads run directories and nothing else: it does not link the trainer (pipeline, learn) or a
// model, so it can watch a run from another process, or a copied run directory on a laptop. The
// page and its chart library (uPlot, vendored by scripts/vendor-uplot) are embedded; nothing is
// loaded from the internet. It listens on loopback unless told otherwise (see CheckAddr).
//
// Long runs stay cheap: curves are downsampled on the server (min and max per bucket, so spikes
// survive) to a few thousand points, and trajectories are indexed once (record offsets and small
// summaries, not the records), then read one page at a time.
package dashboard
