package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrl/agentrl/checkpoint"
	"github.com/agentrl/agentrl/config"
	"github.com/agentrl/agentrl/dist"
	"github.com/agentrl/agentrl/monitor"
	"github.com/agentrl/agentrl/reward"
	"github.com/agentrl/agentrl/rollout"
	"github.com/agentrl/agentrl/traj"
)

// distDir holds, under the run directory, the embedded server's store, the workers' token and
// the server's URL.
const distDir = "dist"

// distSession is the learner's side of the data plane: the server it embeds (if any), its
// connection, and the trajectory consumer. It lasts from the first distributed phase to the end
// of the run, so that one consumer's accounting spans the phases.
type distSession struct {
	srv  *dist.Server
	conn *dist.Conn
	cons *dist.Consumer
	run  string
	cfg  config.WorkersConfig
	// epoch is this learner's incarnation (dist.Pointer.Epoch): a new one at every start, so that
	// workers take a resumed learner's weights and tasks over its crashed predecessor's.
	epoch uint32

	mu       sync.Mutex
	live     map[uint64]*distGroup // groups admitted and not yet trained or given up
	filtered map[string]int64      // trajectories the learner's filter refused, by reason
	// key of the last step trained: Checkpointed acknowledges up to it.
	lastKey int
	stale   int64 // trajectories the learner dropped as stale
	// onClose, when set (tests), sees the consumer before it closes.
	onClose func(*dist.Consumer)
	logf    func(format string, a ...any)
}

// distGroup is one group of a step: group_size samples of one task.
type distGroup struct {
	id      uint64
	step    int
	members map[int]*dist.Delivery // by sample index
}

// distStepKey numbers a step of phase pi across the run, for the consumer's accounting.
func distStepKey(pi, step int) int { return pi<<32 | step }

// distGroupID names group i of step of phase pi on the wire.
func distGroupID(pi, step, i int) uint64 { return uint64(pi)<<40 | uint64(step)<<16 | uint64(i) }

var wireRunRE = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// startDist starts (or returns) the run's data-plane session for phase p.
func (r *Run) startDist(ctx context.Context, p config.Phase) (*distSession, error) {
	w := *p.RL.Async.Workers
	if s := r.dist; s != nil {
		if s.cfg.Listen != w.Listen || s.cfg.URL != w.URL || s.cfg.Run != w.Run {
			return nil, fmt.Errorf("rl.async.workers differs from an earlier phase's; one run has one data plane")
		}
		return s, nil
	}
	s := &distSession{cfg: w, live: map[uint64]*distGroup{}, filtered: map[string]int64{}, lastKey: -1, onClose: r.onDistClose, logf: r.printf}
	s.run = w.Run
	if s.run == "" {
		s.run = strings.Trim(wireRunRE.ReplaceAllString(filepath.Base(r.Dir), "-"), "-")
		if len(s.run) > 64 {
			s.run = s.run[:64]
		}
		if s.run == "" {
			s.run = "run"
		}
	}
	tok, err := w.TokenValue()
	if err != nil {
		return nil, err
	}
	seed, err := w.NKeySeed()
	if err != nil {
		return nil, err
	}
	url, auth := w.URL, dist.Auth{Token: tok, NKeySeed: seed}
	if w.Listen != "" {
		if s.srv, err = r.startDistServer(w, tok); err != nil {
			return nil, err
		}
		url, auth = s.srv.URL(), dist.Auth{Token: s.srv.LearnerToken()}
	}
	ok := false
	defer func() {
		if !ok {
			s.close()
		}
	}()
	if s.conn, err = dist.Dial(url, auth, "agentrl-learner"); err != nil {
		return nil, err
	}
	ackWait := w.TaskAckWait
	if ackWait == 0 {
		ackWait = 30 * time.Second
	}
	if err := s.conn.SetupRun(ctx, dist.RunConfig{Run: s.run, TaskAckWait: ackWait}); err != nil {
		return nil, err
	}
	if err := s.conn.ClearFinished(ctx, s.run); err != nil {
		return nil, err
	}
	inc, err := r.newDistEpoch(ctx, s.conn, s.run)
	if err != nil {
		return nil, err
	}
	s.epoch = inc.Epoch
	// The predecessor's queued tasks are not worth running: this learner issues its own, of its
	// epoch, for every step it admits.
	if err := s.conn.PurgeTasks(ctx, s.run); err != nil {
		return nil, err
	}
	settings, err := json.Marshal(r.workerSettings())
	if err != nil {
		return nil, err
	}
	if err := s.conn.PutRolloutSettings(ctx, s.run, settings); err != nil {
		return nil, err
	}
	// Messages are acknowledged at checkpoints: the consumer holds every step's since the last
	// one, and the steps admitted ahead.
	batch := p.RL.GroupsPerStep * p.RL.GroupSize
	pending := max(batch*(r.Cfg.Checkpoint.Every+p.RL.Async.MaxStaleness+2)*2, 1024)
	// Staleness is judged by the learner when it trains a step (dropStale), not by the consumer
	// as it takes a trajectory: a group whose member the consumer dropped would never fill.
	// The consumer starts at the first trajectory the checkpoint did not settle: what the crashed
	// predecessor held unacknowledged comes back at once, and the checkpoint recognises what it
	// had settled.
	startSeq := inc.Base
	if st := r.state.Dist; st != nil {
		startSeq = st.FirstUnsettled(inc.Base)
		last, err := s.conn.TrajLastSeq(ctx, s.run)
		if err != nil {
			return nil, err
		}
		if m := st.MaxSeq(); last < m {
			where := "the server the run used"
			if s.srv != nil {
				where = "the store the run used, " + filepath.Join(r.Dir, distDir, "store")
			}
			return nil, fmt.Errorf("the trajectory stream of run %s ends at sequence %d but the checkpoint recorded sequence %d: the server lost trajectories (its store deleted or replaced, or another server); resume against %s", s.run, last, m, where)
		}
	}
	s.cons, err = s.conn.NewConsumer(ctx, dist.ConsumerConfig{Run: s.run, MaxAckPending: pending, Filter: s.filter,
		Epoch: s.epoch, StartSeq: startSeq})
	if err != nil {
		return nil, err
	}
	if st := r.state.Dist; st != nil {
		s.cons.Restore(*st)
	}
	if r.restored {
		r.printf("workers: learner epoch %d; trajectories from stream sequence %d on are taken again\n", s.epoch, startSeq)
	}
	if s.srv != nil {
		r.printf("workers: run %s on %s; start each with\n  agentrl worker --connect %s --run %s --token \"$(cat %s)\"\n",
			s.run, url, url, s.run, filepath.Join(r.Dir, distDir, "worker.token"))
		if len(w.WorkerNKeys) > 0 {
			r.printf("  or, with the seed of one of the %d worker nkeys in a file, agentrl worker --connect %s --run %s --nkey SEEDFILE\n", len(w.WorkerNKeys), url, s.run)
		}
	} else {
		r.printf("workers: run %s on %s (agentrl worker --connect %s --run %s)\n", s.run, url, url, s.run)
	}
	r.dist = s
	ok = true
	return s, nil
}

// startDistServer starts the embedded server: its store, the workers' token (unless the config
// names one) and its URL kept under the run directory, so that a resumed run comes back on the
// same port with the same queue and token.
func (r *Run) startDistServer(w config.WorkersConfig, workerTok string) (*dist.Server, error) {
	dir := filepath.Join(r.Dir, distDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	host, portStr, _ := net.SplitHostPort(w.Listen)
	port, _ := strconv.Atoi(portStr)
	tokFile, urlFile := filepath.Join(dir, "worker.token"), filepath.Join(dir, "url")
	if workerTok == "" {
		if b, err := os.ReadFile(tokFile); err == nil {
			workerTok = strings.TrimSpace(string(b))
		} else {
			workerTok = dist.NewToken()
		}
	}
	if port == 0 { // a resumed run keeps its port when it is free
		if b, err := os.ReadFile(urlFile); err == nil {
			if _, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimSpace(string(b)), "nats://")); err == nil {
				port, _ = strconv.Atoi(p)
			}
		}
	}
	cfg := dist.ServerConfig{StoreDir: filepath.Join(dir, "store"), Host: host, Port: port, WorkerToken: workerTok, WorkerNKeys: w.WorkerNKeys}
	srv, err := dist.StartServer(cfg)
	if err != nil && port != 0 && w.Listen != net.JoinHostPort(host, strconv.Itoa(port)) {
		cfg.Port = 0 // the kept port is taken: pick another
		srv, err = dist.StartServer(cfg)
	}
	if err != nil {
		return nil, err
	}
	err = os.WriteFile(tokFile, []byte(workerTok+"\n"), 0o600)
	if err == nil {
		err = os.Chmod(tokFile, 0o600) // a file kept from before
	}
	if err == nil {
		err = writeFileAtomic(urlFile, []byte(srv.URL()+"\n"))
	}
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	return srv, nil
}

// distIncarnation is what the run directory keeps of the data plane across learner starts
// (dist/epoch.json): the last epoch taken, and the first trajectory stream sequence of this run.
type distIncarnation struct {
	Epoch uint32 `json:"epoch"`
	// Base is the trajectory stream's next sequence when the run first set it up: a stream that
	// outlived an earlier run of the same name on an external server holds that run's before it.
	Base uint64 `json:"base"`
}

// newDistEpoch takes a new learner epoch, greater than the server's record, the run directory's
// and the checkpoint's lineage, and records it in the run directory before anything is published.
func (r *Run) newDistEpoch(ctx context.Context, conn *dist.Conn, run string) (distIncarnation, error) {
	dir := filepath.Join(r.Dir, distDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return distIncarnation{}, err
	}
	path := filepath.Join(dir, "epoch.json")
	var inc distIncarnation
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &inc); err != nil {
			return distIncarnation{}, fmt.Errorf("%s: %w", path, err)
		}
	case errors.Is(err, os.ErrNotExist) && r.state.Dist != nil:
		inc.Base = 1 // the checkpoint's record is of this stream
	case errors.Is(err, os.ErrNotExist):
		last, err := conn.TrajLastSeq(ctx, run)
		if err != nil {
			return distIncarnation{}, err
		}
		inc.Base = last + 1
	default:
		return distIncarnation{}, err
	}
	atLeast := inc.Epoch
	if st := r.state.Dist; st != nil {
		atLeast = max(atLeast, st.MaxEpoch())
	}
	if inc.Epoch, err = conn.NextEpoch(ctx, run, atLeast); err != nil {
		return distIncarnation{}, err
	}
	b, err = json.Marshal(inc)
	if err == nil {
		err = writeFileAtomic(path, append(b, '\n'))
	}
	return inc, err
}

// filter refuses a trajectory whose group is not admitted: given up on at its timeout, of a
// step already trained, or of another run's numbering.
func (s *distSession) filter(t *traj.Trajectory) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[t.GroupID]; ok {
		return ""
	}
	s.filtered["late"]++
	return "late"
}

// metrics are the data plane's counters for a step's metrics line.
func (s *distSession) metrics() map[string]float64 {
	m := map[string]float64{}
	for _, reason := range []string{dist.DropStale, dist.DropFailed, dist.DropDuplicate, dist.DropFilter, dist.DropCorrupt, dist.DropSuperseded} {
		m["dist/dropped_"+reason] = 0
	}
	for reason, n := range s.cons.Drops() {
		m["dist/dropped_"+reason] = float64(n)
	}
	m["dist/dropped_stale"] += float64(s.stale)
	s.mu.Lock()
	for reason, n := range s.filtered {
		m["dist/filtered_"+reason] = float64(n)
	}
	s.mu.Unlock()
	m["dist/redelivered"] = float64(s.cons.Redelivered())
	m["dist/tasks_retried"] = float64(s.cons.TasksRetried())
	m["dist/tasks_swept"] = float64(s.cons.TasksSwept())
	m["dist/held"] = float64(s.cons.Held())
	return m
}

// checkpointed acknowledges what the checkpoint just written covers. Acknowledgements that do
// not reach the server (a restarting one) are not an error: the consumer tries them again at the
// next checkpoint, and the checkpoint's state recognises a trajectory whose acknowledgement was
// lost if it comes back.
func (s *distSession) checkpointed(ctx context.Context) error {
	if s == nil || s.lastKey < 0 {
		return nil
	}
	if err := s.cons.Checkpointed(ctx, s.lastKey); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.logf("note: acknowledgements not confirmed by the server (%v); they are sent again at the next checkpoint\n", err)
	}
	return nil
}

func (s *distSession) close() {
	if s == nil {
		return
	}
	if s.cons != nil {
		if s.onClose != nil {
			s.onClose(s.cons)
		}
		s.cons.Close()
	}
	if s.conn != nil {
		s.conn.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
	}
}

// publishWeights saves the current weights as published/vN and publishes them to the workers,
// keeping the η+2 newest versions in the store.
func (r *Run) publishDistWeights(ctx context.Context, s *distSession, eta int) error {
	v := r.version
	dir, err := filepath.Abs(filepath.Join(r.Dir, publishedDir, fmt.Sprintf("v%d", v)))
	if err != nil {
		return err
	}
	if err := checkpoint.Save(dir, r.model, r.tok, nil); err != nil {
		return fmt.Errorf("publishing version %d: %w", v, err)
	}
	if _, err := s.conn.PublishWeights(ctx, s.run, s.epoch, v, dir, eta+2); err != nil {
		return err
	}
	return pruneDirs(filepath.Dir(dir), filepath.Base(dir))
}

// runRLDist is runRLAsync with the episodes run by workers. The learner admits step s, by
// publishing its tasks (the same tasks as the in-process sampler's, group_size samples of each),
// only while s − (steps trained) ≤ η; the trajectories come back through the consumer, which
// drops stale, duplicate, failed-to-decode and unadmitted ones and counts them; the learner
// groups them by group id, waits for the step's groups (or their timeout), trains, and publishes
// the new weights. Every trajectory is acknowledged at the first checkpoint after the step that
// consumed it, so a killed learner gets back what its checkpoint did not cover, and a killed
// worker's tasks go to another worker.
func (r *Run) runRLDist(ctx context.Context, pi int, p config.Phase, start int) error {
	c := p.RL
	eta := c.Async.MaxStaleness
	upd, err := r.newRLUpdate(p, start)
	if err != nil {
		return err
	}
	s, err := r.startDist(ctx, p)
	if err != nil {
		return err
	}
	if err := r.publishDistWeights(ctx, s, eta); err != nil {
		return err
	}
	mon := monitor.New(r.Cfg.Monitor)
	bar := r.newProgressFrom(p.Name, p.Steps, start)
	defer bar.finish()
	timeout := c.Async.Workers.GroupTimeout
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	minMembers := min(2, c.GroupSize)

	envCfg, err := distEnvConfigs(p)
	if err != nil {
		return err
	}
	admitted := start // the next step to admit
	// publish admits tasks as groups first, first+1, … of step and sends them to the workers.
	publish := func(step, first int, tasks []rollout.Task) ([]uint64, error) {
		ids := make([]uint64, len(tasks))
		s.mu.Lock()
		for i := range tasks {
			id := distGroupID(pi, step, first+i)
			ids[i] = id
			s.live[id] = &distGroup{id: id, step: step, members: map[int]*dist.Delivery{}}
		}
		s.mu.Unlock()
		for i, t := range tasks {
			for k := range c.GroupSize {
				task := dist.Task{Run: s.run, TaskID: fmt.Sprintf("%d-%d", ids[i], k), Env: t.Env, Seed: t.Seed, EnvConfig: envCfg[t.Env],
					GroupID: ids[i], Sample: k, Epoch: s.epoch, AdmitVersion: r.version}
				if err := s.conn.PublishTask(ctx, task); err != nil {
					return nil, err
				}
			}
		}
		return ids, nil
	}
	// stepRNGs keeps each admitted step's task stream past its first round: dynamic sampling
	// draws the step's later rounds from it, as the in-process sampler does.
	stepRNGs := map[int]*rand.Rand{}
	admit := func(trained int) error {
		for ; admitted < p.Steps && admitted-trained <= eta; admitted++ {
			rng := r.stepRNG(pi, admitted, 3)
			_ = rng.Uint64() // the in-process sampler's sampling seed: workers sample with their own
			tasks, err := r.drawTasks(rng, p, c.GroupsPerStep, 0)
			if err != nil {
				return err
			}
			if _, err := publish(admitted, 0, tasks); err != nil {
				return err
			}
			stepRNGs[admitted] = rng
		}
		return nil
	}
	if err := admit(start); err != nil {
		return err
	}

	rctx, cancel := context.WithCancel(ctx)
	deliveries := make(chan *dist.Delivery, 256)
	recvErr := make(chan error, 1)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			d, err := s.cons.Next(rctx)
			if err != nil {
				if rctx.Err() == nil {
					recvErr <- err
				}
				return
			}
			select {
			case deliveries <- d:
			case <-rctx.Done():
				return
			}
		}
	})
	// unclaimed holds deliveries whose group was given up on between the filter and here: they
	// are settled with the next step trained.
	var unclaimed []*dist.Delivery
	take := func(d *dist.Delivery) {
		s.mu.Lock()
		defer s.mu.Unlock()
		g, ok := s.live[d.Traj.GroupID]
		if !ok {
			s.filtered["late"]++
			unclaimed = append(unclaimed, d)
			return
		}
		if envCfg[d.Traj.Env] != nil && d.Traj.Status == traj.StatusOK && !hasLevel(d.Traj) {
			// An episode the environment ended without its level: a worker that ignored the task's
			// difficulty (an older one) ran another task than the one drawn.
			s.filtered["no_level"]++
			unclaimed = append(unclaimed, d)
			return
		}
		sample := -1
		if i := strings.LastIndexByte(d.Key, '/'); i >= 0 {
			sample, _ = strconv.Atoi(d.Key[i+1:])
		}
		if sample < 0 || sample >= c.GroupSize || g.members[sample] != nil {
			s.filtered["bad_sample"]++
			unclaimed = append(unclaimed, d)
			return
		}
		g.members[sample] = d
	}
	full := func(ids []uint64) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range ids {
			if g := s.live[id]; g != nil && len(g.members) < c.GroupSize {
				return false
			}
		}
		return true
	}

	trainable := func(ids []uint64) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range ids {
			if g := s.live[id]; g != nil && len(g.members) >= minMembers {
				return true
			}
		}
		return false
	}
	// wait takes deliveries until the groups ids are full or timeout passes.
	wait := func(ids []uint64, deadline *time.Timer) (timedOut bool, err error) {
		for !full(ids) {
			select {
			case d := <-deliveries:
				take(d)
			case err := <-recvErr:
				return false, err
			case <-deadline.C:
				return true, nil
			case <-ctx.Done():
				return false, ctx.Err()
			}
		}
		return false, nil
	}
	var consumed []*dist.Delivery
	partial, givenUp := 0, 0
	// collect takes the groups ids out of the admitted set, in order, members by sample index:
	// every member is sampled (and consumed); a group of fewer than minMembers is given up.
	collect := func(ids []uint64) (sampled []*traj.Trajectory, groups [][]*traj.Trajectory) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, id := range ids {
			g := s.live[id]
			delete(s.live, id)
			if g == nil {
				continue
			}
			var trajs []*traj.Trajectory
			for _, k := range slices.Sorted(maps.Keys(g.members)) {
				d := g.members[k]
				consumed = append(consumed, d)
				trajs = append(trajs, d.Traj)
			}
			sampled = append(sampled, trajs...)
			switch {
			case len(trajs) == c.GroupSize:
				groups = append(groups, trajs)
			case len(trajs) >= minMembers:
				partial++
				groups = append(groups, trajs)
			default:
				givenUp += len(trajs)
				s.filtered["group_timeout"] += int64(len(trajs))
			}
		}
		return sampled, groups
	}

	for step := start; step < p.Steps; step++ {
		w0 := r.now()
		deadline := time.NewTimer(timeout)
		timedOut := false
		ids := make([]uint64, c.GroupsPerStep)
		for i := range ids {
			ids[i] = distGroupID(pi, step, i)
		}
		for waits := 1; ; waits++ {
			var err error
			if timedOut, err = wait(ids, deadline); err != nil {
				deadline.Stop()
				if ctx.Err() != nil {
					return err
				}
				return fmt.Errorf("step %d: %w", step, err)
			}
			if !timedOut || trainable(ids) {
				break
			}
			// A step with no group to train is not a step: wait again, a bounded number of times.
			if err := r.noDistData(s, p, step, waits, timeout); err != nil {
				return err
			}
			timedOut = false
			deadline.Reset(timeout)
		}
		deadline.Stop()
		st0 := r.now()
		// The step's groups, in order, members by sample index; they leave the admitted set.
		consumed = unclaimed
		unclaimed = nil
		partial, givenUp = 0, 0
		sampled, groups := collect(ids)
		as := &asyncStats{learnerWait: st0.Sub(w0).Seconds(), ahead: admitted - step - 1}
		// The reward blocks rescore what the workers returned, as the in-process sampler's
		// episodes are rescored, before they are recorded and trained.
		if err := r.shapeRewards(ctx, nil, p, step, sampled); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		fill := reward.FillStats{Rounds: 1, Sampled: c.GroupsPerStep}
		if ds := c.DynamicSampling; ds != nil {
			// Dynamic sampling: too few informative groups draw more rounds of tasks from the
			// step's stream, published to the workers and awaited as the first round was.
			rounds := distRounds{rng: stepRNGs[step], next: c.GroupsPerStep, first: groups}
			groups, fill, err = rounds.fill(ctx, c.GroupsPerStep, ds.MaxRounds, func(n int) ([][]*traj.Trajectory, error) {
				tasks, first, err := rounds.draw(r, p, n)
				if err != nil {
					return nil, err
				}
				ids, err := publish(step, first, tasks)
				if err != nil {
					return nil, err
				}
				deadline.Reset(timeout)
				_, err = wait(ids, deadline)
				deadline.Stop()
				if err != nil {
					return nil, err
				}
				more, groups := collect(ids)
				if err := r.shapeRewards(ctx, nil, p, step, more); err != nil {
					return nil, err
				}
				sampled = append(sampled, more...)
				return groups, nil
			})
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		delete(stepRNGs, step)
		if err := r.record(p.Name, step+1, sampled); err != nil {
			return err
		}
		groups, dropped, partialStale := dropStale(groups, r.version, int32(eta))
		as.droppedStale, as.partialStale = dropped, partialStale
		s.stale += int64(dropped)
		st := &rlStep{phase: p.Name, step: step + 1, version: r.version, sample: monitor.Measure(sampled, groups),
			fill: fill, async: as, simLatency: simulatedLatency(p.Envs), rewards: rewardMetrics(sampled), samples: r.sampleMetrics(sampled)}
		if trajs := slices.Concat(groups...); len(trajs) > 0 {
			rep, err := r.learnStep(upd, trajs, step, r.stepRNG(pi, step, 4))
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			st.learn = rep
			if err := r.publishDistWeights(ctx, s, eta); err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
		}
		key := distStepKey(pi, step)
		s.cons.Trained(key, consumed...)
		s.lastKey = key
		if err := admit(step + 1); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		st.dist = s.metrics()
		st.dist["dist/partial_groups"] = float64(partial)
		st.dist["dist/groups_timed_out"] = float64(boolInt(timedOut))
		st.times = stepTimes{train: r.now().Sub(st0).Seconds(), step: r.now().Sub(w0).Seconds(), elapsed: r.now().Sub(r.start).Seconds()}
		if err := r.logRL(st, mon, bar); err != nil {
			return err
		}
		if r.onDistStep != nil {
			r.onDistStep(s, step)
		}
		if e := r.Cfg.Eval.Every; e > 0 && (step+1)%e == 0 && step+1 < p.Steps {
			if err := r.evaluate(ctx, fmt.Sprintf("%s-%d", p.Name, step+1)); err != nil {
				return err
			}
		}
		done := step + 1
		due := done%r.Cfg.Checkpoint.Every == 0 || done == p.Steps // the phase end's is written by Train
		if due {
			st := s.cons.State(key, r.version)
			r.state.Dist = &st
		}
		if err := r.afterStep(upd.Learner, pi, step); err != nil {
			return err
		}
		if due && done != p.Steps {
			if err := s.checkpointed(ctx); err != nil {
				return err
			}
		}
	}
	// Every step is trained: what the receiver took meanwhile belongs to groups given up on, and
	// is settled with the phase's last step.
	cancel()
	wg.Wait()
	for {
		select {
		case d := <-deliveries:
			unclaimed = append(unclaimed, d)
			continue
		default:
		}
		break
	}
	s.cons.Trained(s.lastKey, unclaimed...)
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
