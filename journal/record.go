package journal

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"
)

// Kind says what a record creates. The strings are stored on disk.
type Kind string

// Kinds of record.
const (
	KindSandbox   Kind = "sandbox"
	KindContainer Kind = "container"
)

// State is where a record is in its life. The strings are stored on disk.
type State string

// States of a record; see the package comment for the transitions.
const (
	StateCreating State = "creating" // steps are being taken
	StateReady    State = "ready"    // every step done, object stored, not yet answered
	StateCached   State = "cached"   // finished after its request's deadline: kept for the retry
	StateCreated  State = "created"  // handed to a client
	StateUndoing  State = "undoing"  // being rolled back, or waiting to retry a failed undo
	StateRemoving State = "removing" // removal begun
)

func (s State) valid() bool {
	switch s {
	case StateCreating, StateReady, StateCached, StateCreated, StateUndoing, StateRemoving:
		return true
	}
	return false
}

// StepKind names a step; its undo is registered under it. The strings are stored on disk.
type StepKind string

// StepStatus is where a step is. The strings are stored on disk.
type StepStatus string

// Step statuses.
const (
	StepIntent     StepStatus = "intent"      // committed before acting; may or may not have happened
	StepDone       StepStatus = "done"        // the action completed
	StepUndone     StepStatus = "undone"      // the undo completed
	StepUndoFailed StepStatus = "undo-failed" // the undo failed; retried at NextRetry
)

// Step is one action taken towards a record, with what its undo needs.
type Step struct {
	Seq          int               `json:"seq"`
	Kind         StepKind          `json:"kind"`
	Stage        string            `json:"stage,omitempty"`
	Args         map[string]string `json:"args,omitempty"`
	Status       StepStatus        `json:"status"`
	Started      time.Time         `json:"started"`
	Finished     time.Time         `json:"finished,omitzero"`
	UndoAttempts int               `json:"undo_attempts,omitempty"`
	NextRetry    time.Time         `json:"next_retry,omitzero"`
	LastError    string            `json:"last_error,omitempty"`
}

// needsUndo reports whether the world may still hold what this step made.
func (s Step) needsUndo() bool {
	return s.Status == StepIntent || s.Status == StepDone || s.Status == StepUndoFailed
}

// Record is one creation: a pod sandbox or a container, from Begin until it is gone.
type Record struct {
	ID          string            `json:"id"`
	Kind        Kind              `json:"kind"`
	Name        string            `json:"name"`
	Parent      string            `json:"parent,omitempty"` // sandbox ID of a container
	Fingerprint string            `json:"fingerprint"`      // digest of the request, to tell a retry from a new request
	State       State             `json:"state"`
	Stage       string            `json:"stage,omitempty"` // human-readable current stage
	Deadline    time.Time         `json:"deadline,omitzero"`
	Expiry      time.Time         `json:"expiry,omitzero"` // cached records only
	Created     time.Time         `json:"created"`
	Updated     time.Time         `json:"updated"`
	Steps       []Step            `json:"steps,omitempty"`
	Markers     map[string]string `json:"markers,omitempty"`
	Object      json.RawMessage   `json:"object,omitempty"` // the owner's object (sandbox or container)
	// HoldsName is false once the name was released with an undo still failing.
	HoldsName bool `json:"holds_name"`
	// Identity is what the record makes, whatever its name says about the attempt that
	// asked (a pod, or a pod's container): while the record is hidden (see Hidden), a
	// Begin of another name with the same kind and identity finds it. Empty in records
	// written before it existed: those are found by their name only.
	Identity string `json:"identity,omitempty"`
}

// Clone returns a deep copy, so callers never share memory with the index.
func (r Record) Clone() Record {
	c := r
	c.Steps = make([]Step, len(r.Steps))
	for i, s := range r.Steps {
		s.Args = maps.Clone(s.Args)
		c.Steps[i] = s
	}
	if r.Steps == nil {
		c.Steps = nil
	}
	c.Markers = maps.Clone(r.Markers)
	if r.Object != nil {
		c.Object = append(json.RawMessage(nil), r.Object...)
	}
	return c
}

// leftToMaintain reports whether the record is a removal that answered with undos left
// for Maintain (see Journal.Remove): removing, its name released. A removal a crash
// interrupted still holds its name.
func (r Record) leftToMaintain() bool {
	return r.State == StateRemoving && !r.HoldsName
}

// Hidden reports whether the record is a creation no caller has been answered for: in
// progress or cached.
func (r Record) Hidden() bool {
	return r.State == StateCreating || r.State == StateReady || r.State == StateCached
}

// AllDone reports whether every step completed.
func (r Record) AllDone() bool {
	for _, s := range r.Steps {
		if s.Status != StepDone {
			return false
		}
	}
	return true
}

// FailedUndos returns the steps whose undo failed.
func (r Record) FailedUndos() []Step {
	var out []Step
	for _, s := range r.Steps {
		if s.Status == StepUndoFailed {
			out = append(out, s)
		}
	}
	return out
}

// Marker returns the value of a marker and whether it is set.
func (r Record) Marker(key string) (string, bool) {
	v, ok := r.Markers[key]
	return v, ok
}

// ValidID reports whether id has the form of a record ID (64 lowercase hex digits,
// ^[0-9a-f]{64}$, checked by hand: every status call looks an ID up).
func ValidID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func nameKey(kind Kind, name string) []byte { return []byte(string(kind) + "/" + name) }

func identityKey(kind Kind, identity string) string { return string(kind) + "/" + identity }

func encodeRecord(r *Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode record %s: %w", r.ID, err)
	}
	return b, nil
}

// DecodeRecord parses a stored record and checks that it is well formed: garbage in is an
// error out, never a panic.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("decode record: %w", err)
	}
	if err := r.Validate(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// Validate checks a record's invariants.
func (r Record) Validate() error {
	if !ValidID(r.ID) {
		return fmt.Errorf("record id %q: not 64 lowercase hex: %w", r.ID, ErrCorrupt)
	}
	if r.Kind != KindSandbox && r.Kind != KindContainer {
		return fmt.Errorf("record %s: unknown kind %q: %w", r.ID, r.Kind, ErrCorrupt)
	}
	if r.Name == "" {
		return fmt.Errorf("record %s: empty name: %w", r.ID, ErrCorrupt)
	}
	if !r.State.valid() {
		return fmt.Errorf("record %s: unknown state %q: %w", r.ID, r.State, ErrCorrupt)
	}
	for i, s := range r.Steps {
		if s.Seq != i {
			return fmt.Errorf("record %s: step %d has sequence %d: %w", r.ID, i, s.Seq, ErrCorrupt)
		}
		if s.Kind == "" {
			return fmt.Errorf("record %s: step %d has no kind: %w", r.ID, i, ErrCorrupt)
		}
		switch s.Status {
		case StepIntent, StepDone, StepUndone, StepUndoFailed:
		default:
			return fmt.Errorf("record %s: step %d has unknown status %q: %w", r.ID, i, s.Status, ErrCorrupt)
		}
	}
	if len(r.Object) > 0 && !json.Valid(r.Object) {
		return fmt.Errorf("record %s: object is not JSON: %w", r.ID, ErrCorrupt)
	}
	return nil
}
