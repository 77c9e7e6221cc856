package journal

import (
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// BeginRequest describes a creation about to start.
type BeginRequest struct {
	ID          string // optional; a fresh ID is made when empty
	Kind        Kind
	Name        string
	Parent      string
	Identity    string // what it makes, whatever the attempt (see Record.Identity); "" for none
	Fingerprint string
	Deadline    time.Time // the request's deadline, zero if none
	Stage       string
	// Trace is the span the spans of the creation's steps are children of (the
	// request's), when Options.Tracer is set; zero: they are roots of traces of their own.
	Trace trace.SpanContext
}

// Begin reserves req.Name for a new record in state creating; the reservation becomes
// durable with the record's first intent (or lazyFlushDelay later). When a
// record already holds the name, or a hidden record (in progress or cached, never
// answered) of the same kind has req.Identity under another name, it returns a
// *HeldError (errors.Is ErrNameHeld) carrying that record, so the caller can wait on it,
// claim it (Claim with As), roll it back, or refuse. Of an identity there is therefore at
// most one hidden record. Otherwise, while the journal is low on disk space (LowSpace),
// it refuses the creation with ErrLowSpace, having recorded nothing.
func (j *Journal) Begin(req BeginRequest) (Record, error) {
	if req.Kind != KindSandbox && req.Kind != KindContainer {
		return Record{}, fmt.Errorf("begin: unknown kind %q: %w", req.Kind, ErrInvalid)
	}
	if req.Name == "" {
		return Record{}, fmt.Errorf("begin %s: empty name: %w", req.Kind, ErrInvalid)
	}
	if req.ID == "" {
		req.ID = newID()
	} else if !ValidID(req.ID) {
		return Record{}, fmt.Errorf("begin %s %q: id %q is not 64 lowercase hex: %w", req.Kind, req.Name, req.ID, ErrInvalid)
	}
	// Looked at before the lock (it may allocate disk), and only refused below: a
	// request whose name is held is answered from the holder, low space or not.
	lowSpace := j.LowSpace()
	j.mu.Lock()
	if err := j.writable(); err != nil {
		j.mu.Unlock()
		return Record{}, fmt.Errorf("begin %s %q: %w", req.Kind, req.Name, err)
	}
	holder, ok := j.byName[string(nameKey(req.Kind, req.Name))]
	if !ok && req.Identity != "" {
		holder = j.hiddenOf(req.Kind, req.Identity)
		ok = holder != nil
	}
	if ok {
		// The holder as published: a change of it still on its way to disk is no
		// answer to give (see change).
		err := &HeldError{Holder: holder.shown.Clone()}
		j.mu.Unlock()
		return Record{}, err
	}
	if lowSpace != nil {
		j.mu.Unlock()
		return Record{}, fmt.Errorf("begin %s %q: %w", req.Kind, req.Name, lowSpace)
	}
	if j.byID[req.ID] != nil || j.shown[req.ID] != nil {
		j.mu.Unlock()
		return Record{}, fmt.Errorf("begin %s %q: id %s already in use", req.Kind, req.Name, req.ID)
	}
	now := j.opts.Now()
	e := &entry{changed: make(chan struct{}), rec: Record{
		ID: req.ID, Kind: req.Kind, Name: req.Name, Parent: req.Parent, Identity: req.Identity,
		Fingerprint: req.Fingerprint, State: StateCreating, Stage: req.Stage,
		Deadline: req.Deadline, Created: now, HoldsName: true,
	}}
	if j.opts.Tracer != nil {
		e.spans = &stepSpans{parent: req.Trace}
	}
	j.byID[req.ID] = e
	j.byName[string(nameKey(req.Kind, req.Name))] = e
	j.indexIdentity(e)
	// Lazy: until the first intent nothing exists outside the journal, so losing the
	// reservation in a crash loses nothing; it rides on that intent's commit.
	_, err := j.change(e, false, func(*Record) {})
	rec := e.rec.Clone()
	j.mu.Unlock()
	if err != nil {
		return Record{}, fmt.Errorf("begin %s %q: %w", req.Kind, req.Name, err)
	}
	return rec, nil
}

// Intended is one step whose intent Intents commits: its kind, stage and undo arguments.
type Intended struct {
	Kind  StepKind
	Stage string
	Args  map[string]string
}

// Intents appends several steps in status intent in one durable commit, in the order
// given, and returns once it is durable: only then may the caller act, on each step in
// that order. It returns the first step's sequence number; the others follow it. The
// record's stage becomes the first step's (see Staged for the later ones).
//
// Committing a step's intent before an earlier step of the batch has acted is as safe
// as committing it just before its own action: a step in intent may or may not have
// happened, and its undo, idempotent, finds nothing when it did not. The steps batched
// must be ones whose undo costs nothing much when there is nothing to undo, since a
// rollback or a recovery from a crash before they acted runs it anyway.
func (j *Journal) Intents(id string, steps ...Intended) (int, error) {
	if len(steps) == 0 {
		return 0, fmt.Errorf("intents on record %s: no steps: %w", id, ErrInvalid)
	}
	j.mu.Lock()
	e, err := j.takesSteps(id, "intent", steps[0].Kind)
	if err != nil {
		j.mu.Unlock()
		return 0, err
	}
	seq := len(e.rec.Steps)
	p, err := j.change(e, true, func(r *Record) {
		r.Stage = steps[0].Stage
		now := j.opts.Now()
		for i, s := range steps {
			r.Steps = append(r.Steps, Step{Seq: seq + i, Kind: s.Kind, Stage: s.Stage, Args: maps.Clone(s.Args), Status: StepIntent, Started: now})
		}
	})
	if err == nil {
		j.startSteps(e, seq, len(steps))
	}
	j.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := wait(p); err != nil {
		err = fmt.Errorf("intent %s on record %s: %w", steps[0].Kind, id, err)
		j.mu.Lock()
		for i := range steps {
			j.endStep(e, seq+i, err)
		}
		j.mu.Unlock()
		return 0, err
	}
	return seq, nil
}

// takesSteps returns the entry of record id if steps may be added to it (it is being
// created, or created), else an error naming what (verb) of which step kind was refused.
// The caller holds j.mu.
func (j *Journal) takesSteps(id, verb string, kind StepKind) (*entry, error) {
	e, err := j.lookup(id)
	if err == nil && e.rec.State != StateCreating && e.rec.State != StateCreated {
		err = fmt.Errorf("%s %s on record %s: state %s: %w", verb, kind, id, e.rec.State, ErrWrongState)
	}
	return e, err
}

// Noted appends a step that is done without having acted: one whose action had nothing
// to act on when it was taken (NRI's, with no plugin registered), but whose undo must
// still run when the record goes (a plugin registered since has learnt of the record
// and is told of its removal). The change rides on the next commit (see Done): a step
// lost in a crash did nothing. It returns the step's sequence number.
func (j *Journal) Noted(id string, step Intended) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.takesSteps(id, "note", step.Kind)
	if err != nil {
		return 0, err
	}
	seq := len(e.rec.Steps)
	now := j.opts.Now()
	_, err = j.change(e, false, func(r *Record) {
		r.Steps = append(r.Steps, Step{Seq: seq, Kind: step.Kind, Stage: step.Stage, Args: maps.Clone(step.Args), Status: StepDone, Started: now, Finished: now})
	})
	if err == nil {
		j.noteStep(e, seq)
	}
	return seq, err
}

// Staged makes stage the record's current stage, as inspect and waiting requests show
// it: that of a step whose intent Intents committed with an earlier one's, as it begins
// to act. The change rides on the next commit (see Done); it records nothing recovery
// needs.
func (j *Journal) Staged(id, stage string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.lookup(id)
	if err != nil {
		return err
	}
	if e.rec.Stage == stage {
		return nil
	}
	_, err = j.change(e, false, func(r *Record) { r.Stage = stage })
	return err
}

// Done marks step seq as completed. The mark rides on the next commit: if it is lost in a
// crash the step is undone as if it had not finished, which undo's idempotence makes safe.
func (j *Journal) Done(id string, seq int) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.lookup(id)
	if err != nil {
		return err
	}
	if seq < 0 || seq >= len(e.rec.Steps) || e.rec.Steps[seq].Status != StepIntent {
		return fmt.Errorf("done: record %s has no step %d in intent: %w", id, seq, ErrWrongState)
	}
	_, err = j.change(e, false, func(r *Record) {
		r.Steps[seq].Status = StepDone
		r.Steps[seq].Finished = j.opts.Now()
	})
	j.endStep(e, seq, err)
	return err
}

// answer settles a ready record: created when the request that made it is still live (the
// caller will hand it over), cached with an expiry when it is not (the retry claims it). It
// returns the record as committed.
func (j *Journal) answer(id string, live bool) (Record, error) {
	j.mu.Lock()
	e, err := j.lookup(id)
	if err == nil && e.rec.State != StateReady {
		err = fmt.Errorf("answer %s: state %s: %w", id, e.rec.State, ErrWrongState)
	}
	if err != nil {
		j.mu.Unlock()
		return Record{}, err
	}
	p, err := j.change(e, true, func(r *Record) { j.answered(r, live) })
	rec := e.rec.Clone()
	j.mu.Unlock()
	if err != nil {
		return Record{}, err
	}
	return rec, wait(p)
}

// Settle finishes a creation whose steps are all done in one durable commit: it stores
// the finished object and makes the record created when the request that made it is
// still live (the caller will hand it over), or cached with an expiry when it is not (the
// retry claims it). The step marks queued before it ride on the same commit. It returns
// the record as committed. Earlier versions took two commits (the object, state ready;
// then the answer); the one commit is as crash-safe:
//
//   - A crash before the commit leaves the record creating on disk (its last done mark,
//     lazy, is not there either): recovery undoes every step, as it does for a crash
//     during the last step. Nothing leaks; the kubelet's retry makes it anew.
//   - A crash after the commit leaves it created or cached. A cached one is claimed by
//     the retry. A created one whose reply was lost (the crash came before the reply
//     left) is handed back to the retry by the fingerprint rule: the same request finds
//     its name held by a created record with its fingerprint and gets that ID.
//
// The ready state therefore no longer appears on disk for a new creation; a record
// written ready by an earlier version (all steps done, no answer) is still cached by
// recovery (Cache).
func (j *Journal) Settle(id string, object any, live bool) (Record, error) {
	raw, err := json.Marshal(object)
	if err != nil {
		return Record{}, fmt.Errorf("settle %s: encode object: %w", id, err)
	}
	j.mu.Lock()
	e, err := j.finishing("settle", id)
	if err != nil {
		j.mu.Unlock()
		return Record{}, err
	}
	p, err := j.change(e, true, func(r *Record) {
		r.Stage = ""
		r.Object = raw
		j.answered(r, live)
	})
	rec := e.rec.Clone()
	j.mu.Unlock()
	if err != nil {
		return Record{}, err
	}
	return rec, wait(p)
}

// finishing returns the entry of a creation that op (Settle, the tests' ready) may
// finish: creating, with every step done. j.mu is held.
func (j *Journal) finishing(op, id string) (*entry, error) {
	e, err := j.lookup(id)
	switch {
	case err != nil:
	case e.rec.State != StateCreating:
		err = fmt.Errorf("%s %s: state %s: %w", op, id, e.rec.State, ErrWrongState)
	case !e.rec.AllDone():
		err = fmt.Errorf("%s %s: not every step is done: %w", op, id, ErrWrongState)
	}
	return e, err
}

// answered sets a finished record's state as its answer decides: created when the request
// that made it is still live, cached with an expiry from now when it is not.
func (j *Journal) answered(r *Record, live bool) {
	if live {
		r.State = StateCreated
		r.Expiry = time.Time{}
	} else {
		r.State = StateCached
		r.Expiry = j.opts.Now().Add(j.opts.CacheTTL)
	}
}

// Cache turns a ready record into a cached one with a fresh expiry, for recovery: its
// request was never answered, so only a retry may have it.
func (j *Journal) Cache(id string) (Record, error) {
	return j.answer(id, false)
}

// ClaimRequest names the cached record a retry claims, and how the retry names it.
type ClaimRequest struct {
	Kind        Kind
	Name        string // the name the cached record holds
	Fingerprint string // must be the record's: the retry asks for what it made
	// As is the retry's own name when it differs from Name (the same identity asked
	// for under another attempt): the record takes it, and gives Name up, in the
	// claim's commit. Empty keeps Name.
	As string
	// Object replaces the record's object in the same commit (the object as the retry
	// asked for it); nil keeps it.
	Object any
}

// Claim hands a cached record to the retry that asks for it: same kind, name and
// fingerprint. It atomically becomes created, under the retry's name and with the retry's
// object when the request gives them. It returns the record as committed.
func (j *Journal) Claim(req ClaimRequest) (Record, error) {
	var raw json.RawMessage
	if req.Object != nil {
		b, err := json.Marshal(req.Object)
		if err != nil {
			return Record{}, fmt.Errorf("claim %s %q: encode object: %w", req.Kind, req.Name, err)
		}
		raw = b
	}
	j.mu.Lock()
	e, ok := j.byName[string(nameKey(req.Kind, req.Name))]
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("claim %s %q: %w", req.Kind, req.Name, ErrNotFound)
	case e.rec.State != StateCached:
		err = fmt.Errorf("claim %s %q: state %s: %w", req.Kind, req.Name, e.rec.State, ErrWrongState)
	case e.rec.Fingerprint != req.Fingerprint:
		err = fmt.Errorf("claim %s %q: %w", req.Kind, req.Name, ErrFingerprint)
	case req.As != "" && req.As != req.Name && j.byName[string(nameKey(req.Kind, req.As))] != nil:
		err = &HeldError{Holder: j.byName[string(nameKey(req.Kind, req.As))].shown.Clone()}
	}
	if err != nil {
		j.mu.Unlock()
		return Record{}, err
	}
	p, err := j.change(e, true, func(r *Record) {
		r.State = StateCreated
		r.Expiry = time.Time{}
		if req.As != "" {
			r.Name = req.As
		}
		if raw != nil {
			r.Object = raw
		}
	})
	rec := e.rec.Clone()
	j.mu.Unlock()
	if err != nil {
		return Record{}, err
	}
	return rec, wait(p)
}

// Touch pushes the expiry of the cached record holding a name to a full TTL from now, or
// from the toucher's deadline when that is later, and never pulls it in; a waiting retry
// calls it so the resource it waits for cannot expire under it. It reports whether a
// cached record holds the name (and, when its expiry had to move, was moved).
func (j *Journal) Touch(kind Kind, name string, deadline time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.byName[string(nameKey(kind, name))]
	if !ok || e.rec.State != StateCached {
		return false
	}
	expiry := j.opts.Now().Add(j.opts.CacheTTL)
	if dl := deadline.Add(j.opts.CacheTTL); deadline.After(time.Time{}) && dl.After(expiry) {
		expiry = dl
	}
	if !expiry.After(e.rec.Expiry) {
		return true
	}
	_, err := j.change(e, false, func(r *Record) { r.Expiry = expiry })
	return err == nil
}

// SetObject replaces the object of a created record, durably.
func (j *Journal) SetObject(id string, object any) error {
	raw, err := json.Marshal(object)
	if err != nil {
		return fmt.Errorf("set object %s: %w", id, err)
	}
	return j.update(id, func(r *Record) { r.Object = raw })
}

// SetMarker sets (value non-nil) or clears (nil) a marker, durably.
func (j *Journal) SetMarker(id, key string, value *string) error {
	return j.SetMarkers(id, map[string]*string{key: value})
}

// SetMarkers sets (value non-nil) or clears (nil) several markers in one durable write.
func (j *Journal) SetMarkers(id string, markers map[string]*string) error {
	return j.update(id, func(r *Record) { setMarkers(r, markers) })
}

// SetMarkerLazily sets a marker in a write that rides on the next commit (see Done)
// rather than in one of its own: for a marker that records what the world already says
// and that the daemon finds again after a crash that lost it (a container's start,
// which reconciliation reads back from the runtime). Shown at once unless the record
// has a durable change on its way to disk.
func (j *Journal) SetMarkerLazily(id, key string, value *string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.lookup(id)
	if err != nil {
		return err
	}
	_, err = j.change(e, false, func(r *Record) { setMarkers(r, map[string]*string{key: value}) })
	return err
}

func setMarkers(r *Record, markers map[string]*string) {
	for key, value := range markers {
		if value == nil {
			delete(r.Markers, key)
			continue
		}
		if r.Markers == nil {
			r.Markers = map[string]string{}
		}
		r.Markers[key] = *value
	}
}

func (j *Journal) update(id string, mutate func(r *Record)) error {
	j.mu.Lock()
	e, err := j.lookup(id)
	if err != nil {
		j.mu.Unlock()
		return err
	}
	p, err := j.change(e, true, mutate)
	j.mu.Unlock()
	if err != nil {
		return err
	}
	return wait(p)
}

// Get returns a copy of the record with this ID, as published: what the file holds (see
// change).
func (j *Journal) Get(id string) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.shown[id]
	if !ok {
		return Record{}, fmt.Errorf("record %s: %w", id, ErrNotFound)
	}
	return e.shown.Clone(), nil
}

// Peek is Get without the copy: the record shares its steps, markers and object with the
// published one, as Snapshot's do. Read it; never change it. It is for the hot read paths
// (the kubelet's status of every container every ~10 s).
func (j *Journal) Peek(id string) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.shown[id]
	if !ok {
		return Record{}, fmt.Errorf("record %s: %w", id, ErrNotFound)
	}
	return e.shown, nil
}

// List returns copies of the records for which keep returns true (all when keep is nil),
// oldest first, as published.
func (j *Journal) List(keep func(*Record) bool) []Record {
	out, _ := j.WatchAll(keep)
	return out
}

// Snapshot is List without the copies: the records it returns share their steps, markers
// and object with the journal's published ones, which are never changed in place (a
// change publishes a fresh copy). Read them; never change them. It is for the hot read
// paths (the kubelet's relist every second), where copying every record would cost more
// than the answer.
func (j *Journal) Snapshot(keep func(*Record) bool) []Record {
	return j.snapshot(func() iter.Seq[*entry] { return maps.Values(j.shown) }, keep)
}

// SnapshotChildren is Snapshot of the records whose Parent is parent (a sandbox's
// containers): it looks at those alone, not at every record.
func (j *Journal) SnapshotChildren(parent string, keep func(*Record) bool) []Record {
	return j.snapshot(func() iter.Seq[*entry] { return maps.Keys(j.shownChildren[parent]) }, keep)
}

// snapshot is Snapshot of the published entries that entries yields; it is called, and
// what it yields read, under the journal's lock. The entries kept are gathered first and
// their records copied into a slice of their number: a Record is 288 bytes, and
// appending them to a growing slice allocated about two and a half times the answer,
// at the two snapshots a second of the kubelet's relist (issue 52).
func (j *Journal) snapshot(entries func() iter.Seq[*entry], keep func(*Record) bool) []Record {
	var kept []*entry // not sized for every record: a filter may keep one
	j.mu.Lock()
	for e := range entries() {
		if keep == nil || keep(&e.shown) {
			kept = append(kept, e)
		}
	}
	var out []Record
	if len(kept) > 0 {
		out = make([]Record, len(kept))
		for i, e := range kept {
			out[i] = e.shown
		}
	}
	j.mu.Unlock()
	sortRecords(out)
	return out
}

// WatchAll is List plus a channel closed at the next change of any record, taken together
// so that no change is missed between the look and the wait (inspect --watch).
func (j *Journal) WatchAll(keep func(*Record) bool) (records []Record, changed <-chan struct{}) {
	j.mu.Lock()
	out := make([]Record, 0, len(j.shown))
	for _, e := range j.shown {
		if keep == nil || keep(&e.shown) {
			// A shallow copy under the lock: a published record's steps, markers and
			// object are never changed in place (a change publishes a fresh copy, see
			// change), so the deep copy can be made after the lock is released.
			out = append(out, e.shown)
		}
	}
	changed = j.wake
	j.mu.Unlock()
	for i := range out {
		out[i] = out[i].Clone()
	}
	sortRecords(out)
	return out, changed
}

// Changed returns a channel closed at the next published change of any record (a
// commit, a lazy change, a deletion). Taken before a look (Snapshot, List), it lets no
// change slip between the look and the wait: a change published after it was taken
// closes it, whether or not the look saw that change. It is WatchAll without the copies,
// for a reader that keeps its own view (the server's container events).
func (j *Journal) Changed() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.wake
}

// Watch returns the record holding a name (found false when the name is free) and a
// channel closed at the next change of that record (or, when free, of any record). The
// snapshot and the channel are taken together, so no change is ever missed between a
// look and a wait.
func (j *Journal) Watch(kind Kind, name string) (rec Record, found bool, changed <-chan struct{}) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.byName[string(nameKey(kind, name))]
	if !ok {
		return Record{}, false, j.wake
	}
	return e.shown.Clone(), true, e.changed
}
