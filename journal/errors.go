package journal

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Callers branch on them with errors.Is; server maps them to gRPC codes.
var (
	// ErrNotFound is returned when no record has the given ID or name.
	ErrNotFound = errors.New("not found")
	// ErrNameHeld is returned by Begin when a live record holds the name; see HeldError.
	ErrNameHeld = errors.New("name is held")
	// ErrWrongState is returned when an operation does not apply to the record's state.
	ErrWrongState = errors.New("wrong state")
	// ErrFingerprint is returned by Claim when the retry asks for something else.
	ErrFingerprint = errors.New("request differs from the one that created the record")
	// ErrInUse is returned by Open when another process holds the database.
	ErrInUse = errors.New("database is in use by another process")
	// ErrCorrupt is returned when the file or a record in it is damaged.
	ErrCorrupt = errors.New("database is corrupt")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("journal is closed")
	// ErrInvalid is returned by Begin for a request it cannot record (unknown kind, empty
	// name, malformed ID): a caller's mistake, not the journal's state.
	ErrInvalid = errors.New("invalid request")
	// ErrFailed is returned by every change once a commit has failed (disk full, I/O
	// error): from then on the file, not memory, is the truth, and only a restart, which
	// recovers from the file, makes the journal writable again.
	ErrFailed = errors.New("journal commit failed, the journal takes no more changes")
	// ErrLowSpace is returned by Begin (and LowSpace) while the disk of the journal has
	// too little room for its space reserve: new creations are refused before they
	// commit anything, and every other change still commits, into the reserve.
	ErrLowSpace = errors.New("low on disk space")
)

// HeldError tells Begin's caller which record holds the name.
type HeldError struct {
	Holder Record
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s name %q is held by %s (%s)", e.Holder.Kind, e.Holder.Name, e.Holder.ID, e.Holder.State)
}

// Unwrap makes errors.Is(err, ErrNameHeld) true.
func (e *HeldError) Unwrap() error { return ErrNameHeld }

// UndoError lists the undos of one rollback that failed. The record stays in the journal
// (state undoing, name released) and those undos are retried later.
type UndoError struct {
	ID       string
	Failures []StepFailure
}

// StepFailure is one failed undo.
type StepFailure struct {
	Step Step
	Err  error
}

func (e *UndoError) Error() string {
	parts := make([]string, len(e.Failures))
	for i, f := range e.Failures {
		parts[i] = fmt.Sprintf("undo %s (step %d): %v", f.Step.Kind, f.Step.Seq, f.Err)
	}
	return fmt.Sprintf("record %s: %s (will be retried)", e.ID, strings.Join(parts, "; "))
}

// Unwrap returns the step errors.
func (e *UndoError) Unwrap() []error {
	out := make([]error, len(e.Failures))
	for i, f := range e.Failures {
		out[i] = f.Err
	}
	return out
}
