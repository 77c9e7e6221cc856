package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/journal"
)

// creation is one creation in progress, the handle RunPodSandbox and CreateContainer drive
// from the reservation of the name to the answer: begin, then runStep once per step, then
// finish; a failed step rolls it back, and fail does so for a failure between steps.
type creation struct {
	s    *Server
	ctx  context.Context // the request's
	flow string          // names the failure points, "<flow>/..."
	rec  journal.Record
}

// begin reserves req.Name for a creation of flow (see reserve). When the request is
// settled from a record that already exists, it returns no creation and the reservation
// says which record.
func (s *Server) begin(ctx context.Context, flow string, req journal.BeginRequest, same sameRequest) (*creation, reservation, error) {
	req.Trace = trace.SpanContextFromContext(ctx) // the steps' spans are the request's children
	res, err := s.reserve(ctx, req, same)
	if err != nil || res.existingID != "" {
		return nil, res, err
	}
	return &creation{s: s, ctx: ctx, flow: flow, rec: res.record}, res, nil
}

// limit bounds one step.
type limit struct {
	d       time.Duration
	setting string // the configuration key that sets d; "" for a constant
}

// runStep takes step a of creation c: its intent (kind, stage and undo arguments) is
// committed, durably, before a acts, and the step is marked done once it has succeeded.
// a runs detached from the request, for at most lim, so that a slow step still finishes
// and its resource can be cached for the request's retry. When the step fails, c is
// rolled back and the error names the step's stage. Failure points are named
// "<flow>/<step kind>/{before-intent,after-intent,after-action}".
func runStep[T any](c *creation, lim limit, a journal.Action[T]) (T, error) {
	var none T
	seq, err := intend(c, intentOf(a))
	if err != nil {
		return none, err
	}
	result, err := takeIntended(c, seq, lim, a)
	if err != nil {
		return none, c.fail(a.Stage, err)
	}
	return result, nil
}

// intentOf is what intend commits of step a.
func intentOf[T any](a journal.Action[T]) journal.Intended {
	return journal.Intended{Kind: a.Kind, Stage: a.Stage, Args: a.Args}
}

// intend commits the intents of steps of creation c in one durable commit (see
// journal.Intents) and returns the first one's sequence number; the caller then takes
// each with takeIntended. Only steps whose undo is harmless, and cheap, when the step
// never acted are batched so (a sandbox's namespaces, files and network): each is still
// journaled before it acts, and a rollback or a recovery undoes every step of the batch,
// acted or not. The failure points "<flow>/<kind>/before-intent" of every step come
// before the commit.
func intend(c *creation, steps ...journal.Intended) (int, error) {
	for _, st := range steps {
		c.s.log.Debug("stage", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "stage", st.Stage)
		if err := failpoint.Inject(c.point(st.Kind, "before-intent")); err != nil {
			return 0, c.fail(st.Stage, err)
		}
	}
	seq, err := c.s.journal.Intents(c.rec.ID, steps...)
	if err != nil {
		return 0, c.fail(steps[0].Stage, fmt.Errorf("journal intent: %w", err))
	}
	return seq, nil
}

// takeIntended takes step a of creation c, whose intent intend committed as step seq: a
// acts as runStep says, and the step is marked done once it has succeeded. It does not
// roll c back when the step fails: its caller does, once (runStep, plan.run).
func takeIntended[T any](c *creation, seq int, lim limit, a journal.Action[T]) (T, error) {
	var none T
	if err := c.s.journal.Staged(c.rec.ID, a.Stage); err != nil {
		return none, err
	}
	if err := failpoint.Inject(c.point(a.Kind, "after-intent")); err != nil {
		return none, err
	}
	started := time.Now()
	result, err := runWithin(c.ctx, lim, a.Run)
	if err != nil {
		return none, err
	}
	c.s.log.Debug("step done", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "step", a.Kind, "took", time.Since(started))
	if err := failpoint.Inject(c.point(a.Kind, "after-action")); err != nil {
		return none, err
	}
	if err := c.s.journal.Done(c.rec.ID, seq); err != nil {
		return none, err
	}
	return result, nil
}

// noteStep records step a of creation c as done without running it: a step that has
// nothing to act on now but whose undo must run when the record goes (see
// journal.Noted). It costs no commit of its own. Its failure points are a run step's,
// "<flow>/<step kind>/{before-intent,after-intent,after-action}", so that a point armed
// there fires whichever way the step is taken (the crash matrix's NRI rows connect a
// plugin, and so check the journaled way).
func noteStep[T any](c *creation, a journal.Action[T]) error {
	if err := failpoint.Inject(c.point(a.Kind, "before-intent")); err != nil {
		return c.fail(a.Stage, err)
	}
	if _, err := c.s.journal.Noted(c.rec.ID, intentOf(a)); err != nil {
		return c.fail(a.Stage, err)
	}
	for _, at := range []string{"after-intent", "after-action"} {
		if err := failpoint.Inject(c.point(a.Kind, at)); err != nil {
			return c.fail(a.Stage, err)
		}
	}
	return nil
}

// point names the failure point at of c's step of kind: "<flow>/<kind>/<at>".
func (c *creation) point(kind journal.StepKind, at string) string {
	return c.flow + "/" + string(kind) + "/" + at
}

// runWithin runs an action detached from the request's context, for at most lim. An
// action cut off by lim fails with errTimedOut, saying which limit cut it off.
func runWithin[T any](ctx context.Context, lim limit, run func(context.Context) (T, error)) (T, error) {
	actx, cancel := detached(ctx, lim.d)
	defer cancel()
	result, err := run(actx)
	if err != nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		within := lim.d.String()
		if lim.setting != "" {
			within = fmt.Sprintf("%s (%s)", lim.setting, lim.d)
		}
		err = newError(errTimedOut, "not finished within %s: %w", within, err)
	}
	return result, err
}

// finish settles a creation whose steps are all done, in one durable commit
// (journal.Settle, whose comment says why that is as crash-safe as two): created if the
// request is still live, or cached if not, in which case the request fails with
// DeadlineExceeded. It returns the settled record. Its failure points are
// "<flow>/before-answer" (every step done, nothing settled yet) and
// "<flow>/after-answer" (settled, not yet answered).
func (c *creation) finish(object any) (journal.Record, error) {
	s := c.s
	if err := failpoint.Inject(c.flow + "/before-answer"); err != nil {
		return c.rec, c.fail("answer", err)
	}
	live := c.ctx.Err() == nil
	rec, err := s.journal.Settle(c.rec.ID, object, live)
	if err != nil {
		return rec, err
	}
	if err := failpoint.Inject(c.flow + "/after-answer"); err != nil {
		return rec, err
	}
	if !live {
		s.metrics.CacheEvent(rec.Kind, "cached")
		s.log.Info("creation finished after its request ended: cached for the retry", "kind", rec.Kind, "id", rec.ID, "name", rec.Name, "expiry", rec.Expiry)
		return rec, newError(errTimedOut,
			"%s %s (%q) finished after the request's deadline; it is kept until %s and will be returned on the next retry",
			rec.Kind, rec.ID, rec.Name, rec.Expiry.Format(time.RFC3339))
	}
	return rec, nil
}

// fail rolls back a creation that could not be finished and returns err, saying which
// creation failed at which stage (and, if the rollback itself failed otherwise than by
// an undo the journal retries, why).
func (c *creation) fail(stage string, err error) error {
	c.s.log.Info("creation failed: rolling back", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "stage", stage)
	err = fmt.Errorf("%s %s: %s: %w", c.rec.Kind, c.rec.Name, stage, err)
	if rerr := c.s.rollback(c.ctx, c.rec); rerr != nil {
		err = fmt.Errorf("%w; and rolling it back: %w", err, rerr)
	}
	return err
}

// plan is a run of steps of one creation whose intents are committed together (see
// intend) and which then act: add each with addStep, or addStepBeside, then run. The
// steps act in turn, except that a step added beside the one before it acts at the same
// time as that one (a group): the next step acts once the whole group is done.
type plan struct {
	c      *creation
	steps  []journal.Intended
	groups [][]planned // in the order the steps were added
}

// planned is one step of a plan: its stage, and take, which takes it as step seq of its
// creation and, when it fails, has not rolled the creation back.
type planned struct {
	stage string
	take  func(seq int) error
}

// addStep adds step a to plan p, to be taken within lim once the steps added before it are
// done; use receives its result.
func addStep[T any](p *plan, lim limit, a journal.Action[T], use func(T)) {
	p.groups = append(p.groups, nil)
	addStepBeside(p, lim, a, use)
}

// addStepBeside adds step a to plan p, to be taken within lim at the same time as the
// step added last (and any added beside that one): for a step that neither needs that
// one's result nor is needed by it. use receives its result, on a goroutine of its own,
// before run returns; it must touch nothing the other uses of the group touch.
func addStepBeside[T any](p *plan, lim limit, a journal.Action[T], use func(T)) {
	p.steps = append(p.steps, intentOf(a))
	if len(p.groups) == 0 {
		p.groups = append(p.groups, nil)
	}
	last := len(p.groups) - 1
	p.groups[last] = append(p.groups[last], planned{stage: a.Stage, take: func(seq int) error {
		result, err := takeIntended(p.c, seq, lim, a)
		if err == nil && use != nil {
			use(result)
		}
		return err
	}})
}

// run commits the intents of p's steps in one commit and takes them, group by group. When
// a step fails, the other steps of its group are waited for and no later group starts;
// the creation is then rolled back (every step of the plan undone, acted or not), and
// the error of the first failed step of the group, in the order they were added, is
// returned.
func (p *plan) run() error {
	if len(p.steps) == 0 {
		return nil
	}
	seq, err := intend(p.c, p.steps...)
	if err != nil {
		return err
	}
	for _, group := range p.groups {
		stage, err := p.takeGroup(group, seq)
		if err != nil {
			return p.c.fail(stage, err)
		}
		seq += len(group)
	}
	return nil
}

// takeGroup takes the steps of group, the first as step seq, all at once, and waits for
// them; it returns the first failure in the group's order, and the failed step's stage.
// The record's stage (journal.Staged, which each step sets as it begins) is, while any step
// of the group still acts, one of those: when a step ends before the others, the first
// still acting becomes the stage again, so that inspect and a waiting retry name what the
// creation waits for.
func (p *plan) takeGroup(group []planned, seq int) (string, error) {
	if len(group) == 1 {
		return group[0].stage, group[0].take(seq)
	}
	errs := make([]error, len(group))
	var mu sync.Mutex
	acting := make([]bool, len(group))
	for i := range acting {
		acting[i] = true
	}
	var wg sync.WaitGroup
	for i, step := range group {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = step.take(seq + i)
			mu.Lock()
			defer mu.Unlock()
			acting[i] = false
			if j := slices.Index(acting, true); j >= 0 {
				// Only what inspect shows: a journal that failed fails the step's
				// own calls (Done) too.
				_ = p.c.s.journal.Staged(p.c.rec.ID, group[j].stage)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return group[i].stage, err
		}
	}
	return "", nil
}
