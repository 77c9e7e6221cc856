// Package creation is crijournal's creation engine: the reservation of a name and the
// journaled steps of one creation, from the request that asks for a pod sandbox or a
// container to its answer. It owns
//
//   - the reservation of a request's name (Engine.Reserve): a new record, or the
//     request settled from the record that already holds the name or makes the same
//     thing, one of seven outcomes (Outcome, decided in one table by decide);
//   - the wait of a retry on a creation still in progress, on the journal's watchers;
//   - the claim of a creation cached for its retry, and the rule that a retry which
//     waited on a creation that became cached meanwhile still fails at its deadline;
//   - the steps of one creation (Creation): each step's intent is committed before it
//     acts (Step, or several at once in a Plan, whose steps may act side by side), a
//     step with nothing to act on now is noted (Note), a step runs detached from the
//     request within its Limit, and Finish settles the record created or, when the
//     request has ended, cached; Fail, or a failed step, rolls the creation back;
//   - the rollback of a record on behalf of a request (Engine.Rollback, Engine.Undo),
//     whose failed undos are left to the journal's retries.
//
// The steps themselves are values (journal.Action) made by the packages that own the
// resources (netns, storage, oci, units, nri). The engine knows nothing of the CRI: its
// errors wrap ErrTimedOut or ErrNameTaken, or a step's own error, and the server chooses
// the gRPC code at its edge.
//
// A creation goes one straight line: Begin (reserve the name, or answer from the record
// that holds it); then its steps, each with Step or Note, or a Plan of several whose
// intents are committed together; Fail for a failure between steps; Finish.
package creation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/metrics"
)

// Engine reserves names and drives creations over one journal. Build it with New.
type Engine struct {
	journal *journal.Journal
	log     *slog.Logger
	metrics *metrics.Metrics // nil: no metrics
}

// New returns an engine over an open journal; m may be nil.
func New(j *journal.Journal, log *slog.Logger, m *metrics.Metrics) *Engine {
	return &Engine{journal: j, log: log, metrics: m}
}

// Creation is one creation in progress, the handle a flow (RunPodSandbox, CreateContainer)
// drives from the reservation of the name to the answer: Begin, then its steps (Step,
// Note, a Plan), then Finish; a failed step rolls it back, and Fail does so for a failure
// between steps.
type Creation struct {
	e    *Engine
	ctx  context.Context // the request's
	flow string          // names the failure points, "<flow>/..."
	rec  journal.Record
}

// ID is the ID of the record being created.
func (c *Creation) ID() string { return c.rec.ID }

// Name is the name the record holds.
func (c *Creation) Name() string { return c.rec.Name }

// Context is the request's context: it ends with the request, the steps do not.
func (c *Creation) Context() context.Context { return c.ctx }

// Begin reserves req.Name for a creation of flow (see Reserve). When the request is
// settled from a record that already exists, it returns no creation and the reservation
// says which record.
func (e *Engine) Begin(ctx context.Context, flow string, req journal.BeginRequest, same Same) (*Creation, Reservation, error) {
	req.Trace = trace.SpanContextFromContext(ctx) // the steps' spans are the request's children
	res, err := e.Reserve(ctx, req, same)
	if err != nil || res.ExistingID != "" {
		return nil, res, err
	}
	return &Creation{e: e, ctx: ctx, flow: flow, rec: res.Record}, res, nil
}

// Limit bounds one step.
type Limit struct {
	Max     time.Duration
	Setting string // the configuration key that sets Max; "" for a constant
}

// Step takes step a of creation c: its intent (kind, stage and undo arguments) is
// committed, durably, before a acts, and the step is marked done once it has succeeded.
// a runs detached from the request, for at most lim, so that a slow step still finishes
// and its resource can be cached for the request's retry. When the step fails, c is
// rolled back and the error names the step's stage. Failure points are named
// "<flow>/<step kind>/{before-intent,after-intent,after-action}".
func Step[T any](c *Creation, lim Limit, a journal.Action[T]) (T, error) {
	var none T
	seq, err := intend(c, intentOf(a))
	if err != nil {
		return none, err
	}
	result, err := takeIntended(c, seq, lim, a)
	if err != nil {
		return none, c.Fail(a.Stage, err)
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
func intend(c *Creation, steps ...journal.Intended) (int, error) {
	for _, st := range steps {
		c.e.log.Debug("stage", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "stage", st.Stage)
		if err := failpoint.Inject(c.point(st.Kind, "before-intent")); err != nil {
			return 0, c.Fail(st.Stage, err)
		}
	}
	seq, err := c.e.journal.Intents(c.rec.ID, steps...)
	if err != nil {
		return 0, c.Fail(steps[0].Stage, fmt.Errorf("journal intent: %w", err))
	}
	return seq, nil
}

// takeIntended takes step a of creation c, whose intent intend committed as step seq: a
// acts as Step says, and the step is marked done once it has succeeded. It does not
// roll c back when the step fails: its caller does, once (Step, Plan.Run).
func takeIntended[T any](c *Creation, seq int, lim Limit, a journal.Action[T]) (T, error) {
	var none T
	if err := c.e.journal.Staged(c.rec.ID, a.Stage); err != nil {
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
	c.e.log.Debug("step done", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "step", a.Kind, "took", time.Since(started))
	if err := failpoint.Inject(c.point(a.Kind, "after-action")); err != nil {
		return none, err
	}
	if err := c.e.journal.Done(c.rec.ID, seq); err != nil {
		return none, err
	}
	return result, nil
}

// Note records step a of creation c as done without running it: a step that has
// nothing to act on now but whose undo must run when the record goes (see
// journal.Noted). It costs no commit of its own. Its failure points are a run step's,
// "<flow>/<step kind>/{before-intent,after-intent,after-action}", so that a point armed
// there fires whichever way the step is taken (the crash matrix's NRI rows connect a
// plugin, and so check the journaled way).
func Note[T any](c *Creation, a journal.Action[T]) error {
	if err := failpoint.Inject(c.point(a.Kind, "before-intent")); err != nil {
		return c.Fail(a.Stage, err)
	}
	if _, err := c.e.journal.Noted(c.rec.ID, intentOf(a)); err != nil {
		return c.Fail(a.Stage, err)
	}
	for _, at := range []string{"after-intent", "after-action"} {
		if err := failpoint.Inject(c.point(a.Kind, at)); err != nil {
			return c.Fail(a.Stage, err)
		}
	}
	return nil
}

// point names the failure point at of c's step of kind: "<flow>/<kind>/<at>".
func (c *Creation) point(kind journal.StepKind, at string) string {
	return c.flow + "/" + string(kind) + "/" + at
}

// runWithin runs an action detached from the request's context, for at most lim. An
// action cut off by lim fails with ErrTimedOut, saying which limit cut it off.
func runWithin[T any](ctx context.Context, lim Limit, run func(context.Context) (T, error)) (T, error) {
	actx, cancel := detached(ctx, lim.Max)
	defer cancel()
	result, err := run(actx)
	if err != nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		within := lim.Max.String()
		if lim.Setting != "" {
			within = fmt.Sprintf("%s (%s)", lim.Setting, lim.Max)
		}
		err = newError(ErrTimedOut, "not finished within %s: %w", within, err)
	}
	return result, err
}

// Finish settles a creation whose steps are all done, in one durable commit
// (journal.Settle, whose comment says why that is as crash-safe as two): created if the
// request is still live, or cached if not, in which case the request fails with
// ErrTimedOut. It returns the settled record. Its failure points are
// "<flow>/before-answer" (every step done, nothing settled yet) and
// "<flow>/after-answer" (settled, not yet answered).
func (c *Creation) Finish(object any) (journal.Record, error) {
	e := c.e
	if err := failpoint.Inject(c.flow + "/before-answer"); err != nil {
		return c.rec, c.Fail("answer", err)
	}
	live := c.ctx.Err() == nil
	rec, err := e.journal.Settle(c.rec.ID, object, live)
	if err != nil {
		return rec, err
	}
	if err := failpoint.Inject(c.flow + "/after-answer"); err != nil {
		return rec, err
	}
	if !live {
		e.metrics.CacheEvent(rec.Kind, "cached")
		e.log.Info("creation finished after its request ended: cached for the retry", "kind", rec.Kind, "id", rec.ID, "name", rec.Name, "expiry", rec.Expiry)
		return rec, newError(ErrTimedOut,
			"%s %s (%q) finished after the request's deadline; it is kept until %s and will be returned on the next retry",
			rec.Kind, rec.ID, rec.Name, rec.Expiry.Format(time.RFC3339))
	}
	return rec, nil
}

// Fail rolls back a creation that could not be finished and returns err, saying which
// creation failed at which stage (and, if the rollback itself failed otherwise than by
// an undo the journal retries, why).
func (c *Creation) Fail(stage string, err error) error {
	c.e.log.Info("creation failed: rolling back", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "stage", stage)
	err = fmt.Errorf("%s %s: %s: %w", c.rec.Kind, c.rec.Name, stage, err)
	if rerr := c.e.Rollback(c.ctx, c.rec); rerr != nil {
		err = fmt.Errorf("%w; and rolling it back: %w", err, rerr)
	}
	return err
}
