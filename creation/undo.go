package creation

import (
	"context"
	"errors"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// detached returns a context for work that must finish whatever happens to the request:
// undos, and steps whose result is kept for the retry.
func detached(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}

// UndoTimeout bounds one rollback run on behalf of a request.
const UndoTimeout = 2 * time.Minute

// Rollback undoes a record's steps on behalf of a request, detached from the request, for
// at most UndoTimeout. An undo that fails leaves the record to the journal's background
// retries: that is logged here and is not the request's failure (nil is returned; the
// caller's own error says what went wrong). Any other error (the journal failed, the
// record is gone) is returned, not logged.
func (e *Engine) Rollback(ctx context.Context, rec journal.Record) error {
	uctx, cancel := detached(ctx, UndoTimeout)
	defer cancel()
	return e.Undo(uctx, rec)
}

// Undo runs a record's rollback under ctx; see Rollback for its errors. Work the server
// starts by itself runs it under the server's lifetime: an undo cut short when the
// daemon stops is the journal's to retry at the next start.
func (e *Engine) Undo(ctx context.Context, rec journal.Record) error {
	err := e.journal.Rollback(ctx, rec.ID)
	var uerr *journal.UndoError
	if errors.As(err, &uerr) {
		e.log.Warn("undo failed; the name is released and the undo will be retried", "id", rec.ID, "name", rec.Name, "err", err)
		return nil
	}
	return err
}
