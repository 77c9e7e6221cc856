package creation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// Outcome is what Reserve makes of a request, given the record that holds its name or
// makes the same thing (the holder, journal.HeldError). decide chooses it, in one table.
// A holder is "from the same request" when its fingerprint is the request's or one of
// Same.Older; it is "under another name" when the journal found it by the request's
// identity (a hidden creation of an earlier attempt).
type Outcome int

// The seven outcomes. Waited and Superseded look again once the holder has changed, so
// that a request may go through several before its answer.
const (
	// Begun: the name is free (or was made free): a new record, to build.
	Begun Outcome = iota
	// Duplicate: created from the same request under this name: its ID (a true
	// duplicate, or a retry whose creation was created while it waited).
	Duplicate
	// Claimed: cached from the same request: claimed, its ID; it takes this request's
	// name and per-call fields (Same.AsRetried) in the claim's commit.
	Claimed
	// Waited: being made (or undone, or removed) from the same request: waited for on
	// the journal's watcher, then looked at again; ErrTimedOut at the request's deadline.
	Waited
	// KeptForNext: became cached while this request waited on it: kept for the next
	// retry, and this request fails with ErrTimedOut at its own deadline (handing it to a
	// client that may have given up could leak it).
	KeptForNext
	// Superseded: a hidden creation of the same thing under another name, from a
	// different request: rolled back when cached (nobody will ask for it again), waited
	// for while it is being made; then looked at again, and this request makes its own.
	Superseded
	// NameTaken: held under this name by a different request: ErrNameTaken. A cached
	// holder is rolled back first (its request's retries would carry its fingerprint, so
	// nobody will claim it), so that the next request can take the name.
	NameTaken
)

var outcomeNames = [...]string{Begun: "begun", Duplicate: "duplicate", Claimed: "claimed", Waited: "waited",
	KeptForNext: "kept for the next retry", Superseded: "superseded", NameTaken: "name taken"}

func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
	return outcomeNames[o]
}

// decide is the table of Reserve's outcomes for a request req that found the holder h
// (not Begun: that is when nothing holds the name) after waiting on the record waitedOn
// ("" for none):
//
//	holder from    | under      | holder's state        | outcome
//	---------------+------------+-----------------------+------------
//	other request  | another    | any                   | Superseded
//	other request  | this name  | any                   | NameTaken
//	same request   | this name  | created               | Duplicate
//	same request   | any        | cached, waited on     | KeptForNext
//	same request   | any        | cached                | Claimed
//	same request   | any        | any other             | Waited
func decide(req journal.BeginRequest, older []string, h journal.Record, waitedOn string) Outcome {
	retried := h.Name != req.Name // found by identity: an earlier attempt of this one
	if h.Fingerprint != req.Fingerprint && !slices.Contains(older, h.Fingerprint) {
		if retried {
			return Superseded
		}
		return NameTaken
	}
	switch {
	case h.State == journal.StateCreated && !retried:
		return Duplicate
	case h.State == journal.StateCached && h.ID == waitedOn:
		return KeptForNext
	case h.State == journal.StateCached:
		return Claimed
	}
	// creating, ready, undoing or removing (or created under another name, which the
	// journal does not hold for an identity): wait for the next change of the holder.
	return Waited
}

// Reservation is the outcome of Reserve: either a new record to build, or the ID of an
// existing one to answer with.
type Reservation struct {
	Record     journal.Record // valid when ExistingID is empty
	ExistingID string
	Outcome    Outcome // Begun, Duplicate or Claimed
}

// Same says how Reserve recognises a request's earlier calls in the journal, and what a
// cached creation of theirs becomes when this request claims it.
type Same struct {
	// Older are the request's fingerprints in the formats written before the current
	// one, for records written then.
	Older []string
	// AsRetried returns the object a cached record made from an earlier call is
	// recorded with once this request claims it: the same thing, with this call's own
	// per-call fields. nil keeps the object as made.
	AsRetried func(made journal.Record) (any, error)
}

// Reserve begins a creation under req.Name, or settles the request from the record that
// holds the name or, under another name, makes the same thing (req.Identity) and has not
// been answered yet (a hidden creation: journal.Begin). The outcomes and when each is
// chosen are Outcome's and decide's.
func (e *Engine) Reserve(ctx context.Context, req journal.BeginRequest, same Same) (Reservation, error) {
	what := string(req.Kind)
	waitedOn := "" // the ID of the in-progress creation this request has waited for
	for {
		rec, err := e.journal.Begin(req)
		var held *journal.HeldError
		if !errors.As(err, &held) {
			return Reservation{Record: rec, Outcome: Begun}, err
		}
		h := held.Holder
		switch decide(req, same.Older, h, waitedOn) {
		case Superseded:
			if err := e.supersede(ctx, req, h); err != nil {
				return Reservation{}, err
			}
			continue
		case NameTaken:
			if h.State == journal.StateCached {
				e.log.Info("name reused by a different request: rolling back the cached creation", "kind", h.Kind, "id", h.ID, "name", h.Name)
				if err := e.Rollback(ctx, h); err != nil {
					return Reservation{}, err
				}
				return Reservation{}, newError(ErrNameTaken,
					"%s name %q was held by %s %s, made from a different request and finished after that request's deadline; it has been rolled back, so a retry can use the name",
					what, req.Name, what, h.ID)
			}
			return Reservation{}, newError(ErrNameTaken,
				"%s name %q is already used by %s %s (%s), made from a different request; remove it first or change the attempt",
				what, req.Name, what, h.ID, h.State)
		case Duplicate:
			return Reservation{ExistingID: h.ID, Outcome: Duplicate}, nil
		case KeptForNext:
			// A request without a deadline would wait for ever: it takes the record's
			// expiry as its own.
			deadline, ok := ctx.Deadline()
			if !ok {
				deadline = h.Expiry
			}
			e.journal.Touch(req.Kind, h.Name, deadline)
			dctx, dcancel := context.WithDeadline(ctx, deadline)
			wctx, cancel := answerBefore(dctx)
			<-wctx.Done()
			cancel()
			dcancel()
			return Reservation{}, newError(ErrTimedOut,
				"%s %s (%q) is ready but was finished after its request timed out; it will be returned on the next retry",
				what, h.ID, h.Name)
		case Claimed:
			claimed, err := e.claim(req, h, same)
			if errors.Is(err, journal.ErrWrongState) || errors.Is(err, journal.ErrNotFound) {
				// It changed under us (an expiry, say), and the change is on its way to
				// disk: look again once it is published, not in a busy loop.
				if err := e.waitForChange(ctx, req.Kind, h.Name, h); err != nil {
					return Reservation{}, err
				}
				continue
			}
			if err != nil {
				return Reservation{}, err
			}
			e.log.Info("cached creation claimed by its retry", "kind", h.Kind, "id", h.ID, "name", claimed.Name, "made_as", h.Name)
			e.metrics.CacheEvent(h.Kind, "claimed")
			return Reservation{ExistingID: claimed.ID, Outcome: Claimed}, nil
		case Waited:
			if waitedOn != h.ID {
				waitedOn = h.ID
				e.metrics.Stalled(h.Kind, h.Stage)
				deadline, _ := ctx.Deadline()
				e.log.Info("name in progress: waiting", "kind", h.Kind, "id", h.ID, "name", h.Name, "requested", req.Name, "state", h.State,
					"stage", h.Stage, "for", time.Until(deadline).Round(time.Millisecond))
			}
			if err := e.waitForChange(ctx, req.Kind, h.Name, h); err != nil {
				return Reservation{}, err
			}
		}
	}
}

// claim hands the cached record h to req, under req's name and with the object
// same.AsRetried gives it, in one commit.
func (e *Engine) claim(req journal.BeginRequest, h journal.Record, same Same) (journal.Record, error) {
	c := journal.ClaimRequest{Kind: req.Kind, Name: h.Name, Fingerprint: h.Fingerprint, As: req.Name}
	if same.AsRetried != nil {
		obj, err := same.AsRetried(h)
		if err != nil {
			return journal.Record{}, fmt.Errorf("claim %s %s: %w", h.Kind, h.ID, err)
		}
		c.Object = obj
	}
	return e.journal.Claim(c)
}

// supersede makes way for req, which asks for the same thing as the hidden creation h
// under another name, but differently: h is rolled back when cached (its request's
// retries would have asked as it did), and waited for while it is being made (it becomes
// created when its request is still there to be answered, cached when not).
func (e *Engine) supersede(ctx context.Context, req journal.BeginRequest, h journal.Record) error {
	if h.State != journal.StateCached {
		return e.waitForChange(ctx, req.Kind, h.Name, h)
	}
	e.log.Info("asked for again differently: rolling back the cached creation", "kind", h.Kind, "id", h.ID, "name", h.Name, "requested", req.Name)
	return e.Rollback(ctx, h)
}

// waitForChange blocks until the record holding name is no longer h in h's state, or ctx
// ends.
func (e *Engine) waitForChange(ctx context.Context, kind journal.Kind, name string, h journal.Record) error {
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	for {
		cur, found, changed := e.journal.Watch(kind, name)
		if !found || cur.ID != h.ID || cur.State != h.State {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return newError(ErrTimedOut,
				"%s %q is still being created by an earlier request (%s, stage %q); it is kept and will be returned on a later retry",
				kind, name, cur.ID, cur.Stage)
		}
	}
}

// answerMargin is how long before its deadline a waiting request gives up, so that its
// explanation reaches the client before the client's own deadline cuts the call off.
const answerMargin = 200 * time.Millisecond

// answerBefore returns ctx shortened by answerMargin (or by a tenth of what is left, when
// less than two margins are left).
func answerBefore(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	margin := answerMargin
	if left := time.Until(deadline); left < 2*answerMargin {
		margin = left / 10
	}
	return context.WithDeadline(ctx, deadline.Add(-margin))
}
