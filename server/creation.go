package server

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	point := c.flow + "/" + string(a.Kind) + "/"
	c.s.log.Debug("stage", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "stage", a.Stage)
	if err := failpoint.Inject(point + "before-intent"); err != nil {
		return none, c.fail(a.Stage, err)
	}
	seq, err := c.s.journal.Intent(c.rec.ID, a.Stage, a.Kind, a.Args)
	if err != nil {
		return none, c.fail(a.Stage, fmt.Errorf("journal intent: %w", err))
	}
	if err := failpoint.Inject(point + "after-intent"); err != nil {
		return none, c.fail(a.Stage, err)
	}
	started := time.Now()
	result, err := runWithin(c.ctx, lim, a.Run)
	if err != nil {
		return none, c.fail(a.Stage, err)
	}
	c.s.log.Debug("step done", "kind", c.rec.Kind, "id", c.rec.ID, "name", c.rec.Name, "step", a.Kind, "took", time.Since(started))
	if err := failpoint.Inject(point + "after-action"); err != nil {
		return none, c.fail(a.Stage, err)
	}
	if err := c.s.journal.Done(c.rec.ID, seq); err != nil {
		return none, c.fail(a.Stage, err)
	}
	return result, nil
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
