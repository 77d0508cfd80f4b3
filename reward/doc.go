// Package reward turns episodes into learning signals: verifiers (exact match with
// normalisation, numeric tolerance, set match), format rewards, weighted composition, a judge
// reward backed by any text generator, per-turn process rewards, shaping (DAPO's soft overlong
// penalty, progressive dense→outcome schedules) and the batch filters that keep a batch
// informative (dynamic sampling, exclusion of infra-failed episodes).
//
// It scores text and trajectories; it does not tokenize, generate (the judge calls a
// TextGenerator the caller adapts from its inference engine) or compute advantages (package algo).
// A wrong or unparseable answer is a score; only infrastructure failures (a judge that times out
// or errors) are errors.
package reward
