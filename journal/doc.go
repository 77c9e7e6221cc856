// Package journal is crijournal's durable record of every creation and removal: one bbolt
// file holding a record per pod sandbox or container, its name reservation, the ordered
// steps taken to build it (each committed as an intent before it acts, with the arguments
// its undo needs), its state, and its markers.
//
// # On-disk schema (version 2, see package migrations)
//
//	meta/
//	  schema_version -> uint64, big endian
//	records/
//	  <key> -> Record, JSON (ID is 64 lowercase hex; key = migrations.RecordKey(ID),
//	           the ID's halves swapped, so records made together are stored together)
//	names/
//	  <kind>/<name> -> <id>   the live holder of a name; absent once the name is released
//
// A record whose name was released while one of its undos kept failing stays in records/
// (state undoing) without an entry in names/: it no longer pins the name, and its failed
// undos are retried with capped exponential backoff, across restarts.
//
// # States
//
//	Begin ─> creating ─(Intents/Done)*─Settle─┬─ request live ──> created
//	                                          └─ deadline passed ─> cached
//	ready (left by an earlier version, which stored the object and the answer in two
//	       commits) ─Cache (recovery)─> cached
//	creating|ready|cached ─Rollback─> undoing ─> (gone, name free)
//	cached ─Claim (same fingerprint; may take the retry's name and object)─> created
//	created ─Remove─> removing ─> (gone)
//	                  removing, name released (Remove answered; undos of kinds
//	                  registered deferred left) ─Maintain or FinishRemovals─> (gone)
//
// # Identity
//
// A record may carry an identity: what it makes, whatever attempt asked for it (the
// server's: a pod; a pod's container). While a record is hidden (creating, ready or
// cached: no caller has been answered for it), Begin under another name with the same
// kind and identity finds it as the holder, as it would under the same name, so there is
// at most one hidden record of an identity, and the caller can wait on it or claim it
// under its own name (ClaimRequest.As: the rename is in the claim's commit). The identity
// is in the record (JSON "identity"), indexed in memory at Open; records written before it
// have none and are found by name only.
//
// # Concurrency and durability
//
// The in-memory index (by ID and by kind/name) is authoritative while the process runs and
// is rebuilt from the file at Open. Every change is applied to the index under one mutex and
// queued, in that same order, to a single committer goroutine that writes everything queued
// so far in one bbolt transaction (group commit): it commits as soon as the previous commit
// finishes, never waiting for more work. Calls that must be durable (Intents, Settle, Cache,
// Claim, Remove's removing mark, ...) wait for their commit; Done rides on the next commit,
// which is safe because every undo is idempotent; Begin rides too, since nothing exists
// outside the journal before the first intent; and so does the delete that ends a Remove,
// since a crash that loses it leaves the record removing, which the next start finishes.
// None of these calls takes a context: a change is applied to the index at once and its
// commit, once queued, happens whatever the caller does, so there is nothing to cancel.
// The calls that run other code (the undos: Rollback, Remove, UndoSteps, the sweeps and
// Maintain) take one and honour it.
//
// Readers (Get, List, Watch) and watchers see a change only once it is published: a
// durable change when its commit has succeeded, so memory never runs ahead of the file; a
// lazy one at once (losing it in a crash is harmless by design), unless a durable change of
// the same record is still on its way to disk. Calls that change records decide on the
// records as queued.
//
// # Fail-stop
//
// A commit that fails (disk full, I/O error) publishes nothing and fails the journal:
// Failed is closed, Err says why, and every later change returns ErrFailed. The daemon
// then stops, and its next start recovers from what the file holds.
//
// Watch returns a record's snapshot together with a channel that is closed at its next
// published change, both taken under the index lock, so a change can never slip between
// a caller's look and its wait.
//
// # Disk space
//
// With Options.SpaceReserve, the file keeps that much disk allocated ahead of its growth
// (preallocated past its end; see space.go), so that a full disk does not fail the next commit that grows the file: the
// kubelet frees a full disk by stopping and removing pods, and those commits must go
// through. While the reserve cannot be kept whole, or the disk has less room than it,
// the journal is low on space: Begin refuses new creations (ErrLowSpace) before it
// records anything, and every other change commits into the reserve. A commit that needs
// more than the reserve has left fails stop, as above.
//
// # Undo
//
// A step's undo is data: its StepKind and Args. Packages that own resources register an
// UndoFunc per kind in a Registry; Rollback runs the undos of a record LIFO, runs all of them
// even when one fails, marks each step, and releases the name. A kind registered with
// RegisterDeferred is one whose undo nobody waits for once the record is removed (a root
// filesystem's deletion): while Maintain runs, Remove answers before it, leaving it and the
// steps made before it to Maintain, still LIFO and still in the file until done.
package journal
