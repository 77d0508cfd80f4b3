// Package reward turns episodes into learning signals: verifiers (exact match with
// normalisation, exact rationals, numeric tolerance, set match, test cases), which are the
// built-in environments' graders (Solved is the one success rule), format rewards, weighted
// composition, a judge reward backed by any text generator, per-turn process rewards, shaping
// (DAPO's soft overlong penalty, progressive dense→outcome schedules), the Config of a run's
// reward: block and the Shaper that applies it to trajectories, and the batch filters that keep
// a batch informative (dynamic sampling, exclusion of infra-failed episodes).
//
// It scores text and trajectories; it does not tokenize, generate (the judge calls a
// TextGenerator the caller adapts from its inference engine) or compute advantages (package algo).
// A wrong or unparseable answer is a score, and so is a judgement that times out (the judge's
// fallback, counted); only infrastructure failures (a judge's generator that errors) are errors.
package reward
