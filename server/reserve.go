package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// reservation is the outcome of reserve: either a new record to build, or the ID of an
// existing one to answer with (claimed when reserve claimed it from the cache for this
// request).
type reservation struct {
	record     journal.Record // valid when existingID is empty
	existingID string
	claimed    bool
}

// sameRequest says how reserve recognises a request's earlier calls in the journal, and
// what a cached creation of theirs becomes when this request claims it.
type sameRequest struct {
	// older are the request's fingerprints in the formats written before the current
	// one (olderFingerprints), for records written then.
	older []string
	// asRetried returns the object a cached record made from an earlier call is
	// recorded with once this request claims it: the same thing, with this call's own
	// per-call fields (see leaveOutPerCall). nil keeps the object as made.
	asRetried func(made journal.Record) (any, error)
}

// reserve begins a creation under req.Name, or settles the request from the record that
// holds the name or, under another name, makes the same thing (req.Identity) and has not
// been answered yet (a hidden creation: journal.Begin). A holder is from the same request
// when its fingerprint is req.Fingerprint or one of same.older:
//   - created from the same request: its ID (a true duplicate);
//   - cached from the same request: claimed, its ID; it takes this request's name and
//     per-call fields (same.asRetried) in the claim's commit;
//   - still being made from the same request: wait for it on the journal's watcher. If it
//     is created normally meanwhile, its ID; if it becomes cached while we wait, this
//     request still fails at its own deadline (the next retry gets it: handing it to a
//     client that may have given up could leak it);
//   - a hidden creation of the same thing under another name, from a different request:
//     rolled back when cached (nobody will ask for it again), waited for while it is
//     being made; then this request makes its own;
//   - cached under this name from a different request: rolled back, and AlreadyExists
//     saying so (the next request can take the name);
//   - anything else under this name from a different request: AlreadyExists.
func (s *Server) reserve(ctx context.Context, req journal.BeginRequest, same sameRequest) (reservation, error) {
	what := string(req.Kind)
	waitedOn := "" // the ID of the in-progress creation this request has waited for
	for {
		rec, err := s.journal.Begin(req)
		var held *journal.HeldError
		if !errors.As(err, &held) {
			return reservation{record: rec}, err
		}
		h := held.Holder
		retried := h.Name != req.Name // found by identity: an earlier attempt of this one
		if h.Fingerprint != req.Fingerprint && !slices.Contains(same.older, h.Fingerprint) {
			if retried {
				if err := s.supersede(ctx, req, h); err != nil {
					return reservation{}, err
				}
				continue
			}
			if h.State == journal.StateCached {
				// Nobody will claim it: its request's retries would carry its
				// fingerprint. Free the name, and say so; this request is refused like
				// any other that finds the name taken by a different one.
				s.log.Info("name reused by a different request: rolling back the cached creation", "kind", h.Kind, "id", h.ID, "name", h.Name)
				if err := s.rollback(ctx, h); err != nil {
					return reservation{}, err
				}
				return reservation{}, newError(errExists,
					"%s name %q was held by %s %s, made from a different request and finished after that request's deadline; it has been rolled back, so a retry can use the name",
					what, req.Name, what, h.ID)
			}
			return reservation{}, newError(errExists,
				"%s name %q is already used by %s %s (%s), made from a different request; remove it first or change the attempt",
				what, req.Name, what, h.ID, h.State)
		}
		switch {
		case h.State == journal.StateCreated && !retried:
			return reservation{existingID: h.ID}, nil
		case h.State == journal.StateCached:
			if h.ID == waitedOn {
				// It finished after its own request's deadline while we waited: keep it
				// for the next retry and fail at our deadline. A request without a
				// deadline would wait for ever: it takes the record's expiry as its own.
				deadline, ok := ctx.Deadline()
				if !ok {
					deadline = h.Expiry
				}
				s.journal.Touch(req.Kind, h.Name, deadline)
				dctx, dcancel := context.WithDeadline(ctx, deadline)
				wctx, cancel := answerBefore(dctx)
				<-wctx.Done()
				cancel()
				dcancel()
				return reservation{}, newError(errTimedOut,
					"%s %s (%q) is ready but was finished after its request timed out; it will be returned on the next retry",
					what, h.ID, h.Name)
			}
			claimed, err := s.claim(req, h, same)
			if errors.Is(err, journal.ErrWrongState) || errors.Is(err, journal.ErrNotFound) {
				// It changed under us (an expiry, say), and the change is on its way to
				// disk: look again once it is published, not in a busy loop.
				if err := s.waitForChange(ctx, req.Kind, h.Name, h); err != nil {
					return reservation{}, err
				}
				continue
			}
			if err != nil {
				return reservation{}, err
			}
			s.log.Info("cached creation claimed by its retry", "kind", h.Kind, "id", h.ID, "name", claimed.Name, "made_as", h.Name)
			s.metrics.CacheEvent(h.Kind, "claimed")
			return reservation{existingID: claimed.ID, claimed: true}, nil
		}
		// creating, ready, undoing or removing: wait for the next change of the holder.
		if waitedOn != h.ID {
			waitedOn = h.ID
			s.metrics.Stalled(h.Kind, h.Stage)
			deadline, _ := ctx.Deadline()
			s.log.Info("name in progress: waiting", "kind", h.Kind, "id", h.ID, "name", h.Name, "requested", req.Name, "state", h.State,
				"stage", h.Stage, "for", time.Until(deadline).Round(time.Millisecond))
		}
		if err := s.waitForChange(ctx, req.Kind, h.Name, h); err != nil {
			return reservation{}, err
		}
	}
}

// claim hands the cached record h to req, under req's name and with the object
// same.asRetried gives it, in one commit.
func (s *Server) claim(req journal.BeginRequest, h journal.Record, same sameRequest) (journal.Record, error) {
	c := journal.ClaimRequest{Kind: req.Kind, Name: h.Name, Fingerprint: h.Fingerprint, As: req.Name}
	if same.asRetried != nil {
		obj, err := same.asRetried(h)
		if err != nil {
			return journal.Record{}, fmt.Errorf("claim %s %s: %w", h.Kind, h.ID, err)
		}
		c.Object = obj
	}
	return s.journal.Claim(c)
}

// supersede makes way for req, which asks for the same thing as the hidden creation h
// under another name, but differently: h is rolled back when cached (its request's
// retries would have asked as it did), and waited for while it is being made (it becomes
// created when its request is still there to be answered, cached when not).
func (s *Server) supersede(ctx context.Context, req journal.BeginRequest, h journal.Record) error {
	if h.State != journal.StateCached {
		return s.waitForChange(ctx, req.Kind, h.Name, h)
	}
	s.log.Info("asked for again differently: rolling back the cached creation", "kind", h.Kind, "id", h.ID, "name", h.Name, "requested", req.Name)
	return s.rollback(ctx, h)
}

// waitForChange blocks until the record holding name is no longer h in h's state, or ctx
// ends.
func (s *Server) waitForChange(ctx context.Context, kind journal.Kind, name string, h journal.Record) error {
	ctx, cancel := answerBefore(ctx)
	defer cancel()
	for {
		cur, found, changed := s.journal.Watch(kind, name)
		if !found || cur.ID != h.ID || cur.State != h.State {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return newError(errTimedOut,
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

// detached returns a context for work that must finish whatever happens to the request:
// undos, and steps whose result is kept for the retry.
func detached(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// undoTimeout bounds one rollback run on behalf of a request.
const undoTimeout = 2 * time.Minute

// rollback undoes a record's steps on behalf of a request. An undo that fails leaves the
// record to the journal's background retries: that is logged here and is not the
// request's failure (nil is returned; the caller's own error says what went wrong). Any
// other error (the journal failed, the record is gone) is returned, not logged.
func (s *Server) rollback(ctx context.Context, rec journal.Record) error {
	uctx, cancel := detached(ctx, undoTimeout)
	defer cancel()
	return s.undo(uctx, rec)
}

// undo runs a record's rollback under ctx; see rollback for its errors. Work the server
// starts by itself runs it under the server's lifetime: an undo cut short when the
// daemon stops is the journal's to retry at the next start.
func (s *Server) undo(ctx context.Context, rec journal.Record) error {
	err := s.journal.Rollback(ctx, rec.ID)
	var uerr *journal.UndoError
	if errors.As(err, &uerr) {
		s.log.Warn("undo failed; the name is released and the undo will be retried", "id", rec.ID, "name", rec.Name, "err", err)
		return nil
	}
	return err
}
