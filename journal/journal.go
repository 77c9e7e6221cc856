package journal

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"go.opentelemetry.io/otel/trace"

	"github.com/crijournal/crijournal/migrations"
)

// Options configure Open. The zero value is usable: every field documents its default.
type Options struct {
	// LockTimeout is how long Open waits for the file lock held by another process before
	// failing with ErrInUse. Default 1s.
	LockTimeout time.Duration
	// ReadOnly opens the file for inspection: a shared lock, no migrations, no writes.
	ReadOnly bool
	// NoSync turns off fsync of every commit. THIS IS UNSAFE: a crash can lose or corrupt
	// the journal. For benchmarks only, to measure what durability costs.
	NoSync bool
	// CacheTTL is how long a cached record is kept after the last request that touched
	// its name. Default 2m.
	CacheTTL time.Duration
	// UndoRetryMin and UndoRetryMax bound the exponential backoff between retries of a
	// failed undo. Defaults 1s and 5m.
	UndoRetryMin, UndoRetryMax time.Duration
	// UndoTimeout bounds one undo: an undo still running then is cancelled (through its
	// context) and counts as failed, to be retried later, so that a resource that cannot
	// be cleaned (a CNI plugin that hangs) never holds up recovery, a removal or a
	// rollback for ever. Default 2m.
	UndoTimeout time.Duration
	// Registry holds the undo functions; nil means an empty registry (every undo fails
	// with "no undo registered" and is retried later).
	Registry *Registry
	// Logger receives the journal's logs; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests set it.
	Now func() time.Time
	// Hooks receive the journal's events, for metrics. Each may be nil.
	Hooks Hooks
	// Tracer, when set, makes a span of every step, from its intent to its done mark,
	// and of every undo (see trace.go). nil (the default): no spans, at no cost.
	Tracer trace.Tracer
	// SpaceReserve is how many bytes of disk are kept allocated to the file ahead of its
	// growth, so that stops, removals and undos still commit on a full disk (see space):
	// while the reserve cannot be kept whole, or the disk has less room than it, the
	// journal is low on space (LowSpace) and Begin refuses new creations. Default 0: no
	// reserve, and a full disk fails the journal at the next commit that grows the file.
	// Ignored by a read-only journal.
	SpaceReserve int64
	// Release is the binary's release ("0.2.0"): recorded in the file when it is opened for
	// writing (migrations.KeyWrittenBy), and named, with the file's, when a newer schema is
	// refused (NewerSchemaError). Empty: nothing recorded.
	Release string

	// fallocate, when set (by tests), replaces the preallocation of the space reserve.
	fallocate func(fd int, off, n int64) error
}

// Hooks are called on the journal's events. They must be quick and must not call back
// into the journal.
type Hooks struct {
	// Committed is called after each commit with its duration and number of writes.
	Committed func(d time.Duration, writes int)
	// Undone is called after each undo with its step kind, whether it retried an undo
	// that had failed before, and its error (nil on success).
	Undone func(kind StepKind, retry bool, err error)
	// Expired is called when a cached record's expiry passed and it is rolled back.
	Expired func(rec Record)
}

func (o *Options) setDefaults() {
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 2 * time.Minute
	}
	if o.UndoRetryMin <= 0 {
		o.UndoRetryMin = time.Second
	}
	if o.UndoRetryMax < o.UndoRetryMin {
		o.UndoRetryMax = 5 * time.Minute
		if o.UndoRetryMax < o.UndoRetryMin {
			o.UndoRetryMax = o.UndoRetryMin
		}
	}
	if o.UndoTimeout <= 0 {
		o.UndoTimeout = 2 * time.Minute
	}
	if o.Registry == nil {
		o.Registry = NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Journal is an open journal file and its in-memory index. It is safe for concurrent use.
type Journal struct {
	path string
	db   *bolt.DB
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// byID and byName index the records as queued for the file: every call that
	// changes a record decides on these (under mu, in the order the commits write).
	byID   map[string]*entry
	byName map[string]*entry // nameKey -> entry holding the name
	// byIdentity holds, by identityKey, the records of each identity (which never
	// changes): Begin looks there for a hidden creation of the same thing.
	byIdentity entrySets
	// shown indexes the records as published: what Get, List and Watch return. A
	// durable change is published only once its commit succeeded, so readers and
	// watchers never see what the file may not hold (see publish).
	shown map[string]*entry
	// shownChildren indexes the published records that have a parent by their parent
	// (a sandbox's containers): SnapshotChildren reads it.
	shownChildren entrySets
	undoing       map[string]chan struct{}
	closed        bool
	// wake is closed and replaced when a change is published; runEnded when an undo run
	// ends. Maintain looks again at either: expiry or retry times may have moved.
	wake, runEnded chan struct{}

	commits *committer
	// space keeps the space reserve; nil when there is none.
	space *space
	// maintainPasses counts Maintain's looks for due work (Stats).
	maintainPasses atomic.Int64
	// maintaining counts the Maintain loops running: while one runs, a removal leaves
	// deferred undos to it (see Remove). lastDeferred is when a removal last did (under
	// mu): they wait for a pause (deferredQuiet).
	maintaining  atomic.Int32
	lastDeferred time.Time
}

// entry is a record in the index: as queued for the file (rec) and as published (shown),
// plus the channel closed at its next published change.
type entry struct {
	rec     Record // as queued: what the next commit writes
	shown   Record // as published: see Journal.publish
	changed chan struct{}
	// version counts the changes queued for rec, shownVersion is the version of shown;
	// durablePending counts the durable writes queued and not yet published.
	version, shownVersion uint64
	durablePending        int
	// spans are the spans of its steps in progress; nil without Options.Tracer.
	spans *stepSpans
}

// Open opens (creating if needed) the journal at path, runs migrations and rebuilds the
// index. A file that is locked, damaged or written by a newer schema is refused with an
// error that names the file and says what to do; Open never panics on a bad file.
func Open(path string, opts Options) (*Journal, error) {
	opts.setDefaults()
	var created []string // directories that get an entry for a new file (see newfile.go)
	if !opts.ReadOnly {
		created = newPath(path)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("open journal: %w", err)
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	db, err := openBolt(path, opts)
	if err != nil {
		return nil, err
	}
	if err := syncNewPath(created); err != nil {
		db.Close()
		return nil, fmt.Errorf("open journal %s: sync its directory: %w", path, err)
	}
	j := &Journal{
		path:          path,
		db:            db,
		opts:          opts,
		log:           opts.Logger,
		byID:          map[string]*entry{},
		byName:        map[string]*entry{},
		byIdentity:    entrySets{},
		shown:         map[string]*entry{},
		shownChildren: entrySets{},
		undoing:       map[string]chan struct{}{},
		wake:          make(chan struct{}),
		runEnded:      make(chan struct{}),
	}
	if err := j.load(); err != nil {
		db.Close()
		return nil, err
	}
	if !opts.ReadOnly {
		var hw int64
		db.View(func(tx *bolt.Tx) error { hw = tx.Size(); return nil })
		if j.space, err = newSpace(path, opts.SpaceReserve, hw, opts); err != nil {
			db.Close()
			return nil, err
		}
		j.commits = newCommitter(db, opts.Hooks.Committed, j.published, j.space)
	}
	return j, nil
}

func openBolt(path string, opts Options) (db *bolt.DB, err error) {
	if err := preflight(path, opts); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, corruptError(path, fmt.Errorf("%v", p))
		}
	}()
	db, err = bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        opts.LockTimeout,
		NoFreelistSync: true,
		NoSync:         opts.NoSync,
		ReadOnly:       opts.ReadOnly,
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("open journal %s: %w (another crijournal holds it; stop it or use its socket)", path, ErrInUse)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return nil, corruptError(path, err)
	case err != nil:
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	return db, nil
}

// corruptError is Open's error for a file bbolt cannot read back: it names the file, says
// that it was left as it is, and what starting again costs.
func corruptError(path string, cause error) error {
	return fmt.Errorf("open journal %s: %w: %v; the file was left as it is and the daemon will not start on it. "+
		"`crijournal inspect --check` lists the damage. To start with an empty journal, move it aside and keep it "+
		"(mv %s %s.corrupt): the records of this node's pods and containers are then lost, so nothing undoes what they made; "+
		"`crijournal inspect --leaks` lists it for removal by hand, and the kubelet makes its pods again. Or restore a copy of the file",
		path, ErrCorrupt, cause, path, path)
}

// load checks the file, runs migrations and fills the index; a panic inside bbolt on a
// damaged page is turned into ErrCorrupt.
func (j *Journal) load() (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = corruptError(j.path, fmt.Errorf("%v", p))
		}
	}()
	migrate := func(tx *bolt.Tx) error {
		from, to, err := migrations.Run(tx)
		if err != nil {
			if errors.Is(err, migrations.ErrNewerSchema) {
				return newerSchemaError(tx, j.path, j.opts.Release)
			}
			return fmt.Errorf("open journal %s: %w", j.path, err)
		}
		if tx.Writable() && j.opts.Release != "" {
			if err := migrations.SetWrittenBy(tx, j.opts.Release); err != nil {
				return fmt.Errorf("open journal %s: %w", j.path, err)
			}
		}
		if from != to {
			j.log.Info("journal schema migrated", "path", j.path, "from", from, "to", to)
		}
		return j.loadRecords(tx)
	}
	if j.opts.ReadOnly {
		return j.db.View(migrate)
	}
	return j.db.Update(migrate)
}

func (j *Journal) loadRecords(tx *bolt.Tx) error {
	records := tx.Bucket(migrations.BucketRecords)
	if records == nil {
		return corruptError(j.path, errors.New("records bucket missing"))
	}
	if err := records.ForEach(func(k, v []byte) error {
		rec, err := DecodeRecord(v)
		if err != nil {
			return corruptError(j.path, fmt.Errorf("record %q: %w", k, err))
		}
		if string(migrations.RecordKey(rec.ID)) != string(k) {
			return corruptError(j.path, fmt.Errorf("record stored under %q has id %q", k, rec.ID))
		}
		e := &entry{rec: rec, shown: rec.Clone(), changed: make(chan struct{})}
		j.byID[rec.ID] = e
		j.shown[rec.ID] = e
		j.shownChildren.add(rec.Parent, e)
		j.indexIdentity(e)
		return nil
	}); err != nil {
		return err
	}
	names := tx.Bucket(migrations.BucketNames)
	if names == nil {
		return corruptError(j.path, errors.New("names bucket missing"))
	}
	return names.ForEach(func(k, v []byte) error {
		e, ok := j.byID[string(v)]
		if !ok {
			return corruptError(j.path, fmt.Errorf("name %q points to missing record %q", k, v))
		}
		if string(nameKey(e.rec.Kind, e.rec.Name)) != string(k) {
			return corruptError(j.path, fmt.Errorf("name %q points to record %s named %q", k, v, e.rec.Name))
		}
		j.byName[string(k)] = e
		return nil
	})
}

// Path returns the file's path.
func (j *Journal) Path() string { return j.path }

// Close stops the committer after writing everything queued, and closes the file.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	if j.commits != nil {
		j.commits.close()
	}
	if j.space != nil {
		j.space.close()
	}
	return j.db.Close()
}

// Check runs bbolt's consistency check and the journal's own invariants on the file.
// Commits wait while it runs.
func (j *Journal) Check() []error {
	if j.commits != nil {
		j.commits.txMu.Lock()
		defer j.commits.txMu.Unlock()
	}
	var problems []error
	err := j.db.View(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			problems = append(problems, cerr)
		}
		return checkInvariants(tx, &problems)
	})
	if err != nil {
		problems = append(problems, err)
	}
	return problems
}

// CheckFile checks a journal file that no daemon has open, without loading it: bbolt's own
// check and the journal's invariants, all problems listed, where Open would stop at the
// first. A file bbolt cannot read at all is one problem. The error is for a file that
// cannot be checked: missing, or locked by a daemon (ErrInUse).
func CheckFile(path string, lockTimeout time.Duration) (problems []error, err error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("check journal %s: %w", path, err)
	}
	// bbolt's check walks the tree in a goroutine of its own (to rebuild the freelist,
	// which is not stored), where a panic on a damaged page cannot be recovered: walk it
	// here first, as Open does. When that walk fails, bbolt's check is skipped and only
	// the journal's invariants are checked, as far as they can be read.
	structural := preflight(path, Options{LockTimeout: lockTimeout})
	if errors.Is(structural, ErrInUse) {
		return nil, fmt.Errorf("check journal %s: %w (another crijournal holds it)", path, ErrInUse)
	}
	if structural != nil {
		problems = append(problems, structural)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockTimeout, ReadOnly: true})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("check journal %s: %w (another crijournal holds it)", path, ErrInUse)
	case err != nil && structural == nil:
		return []error{fmt.Errorf("%w: bbolt cannot open the file: %v", ErrCorrupt, err)}, nil
	case err != nil:
		return problems, nil
	}
	defer db.Close()
	// Damaged pages make bbolt panic, or fault on reads past the end of a truncated file.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			problems = append(problems, fmt.Errorf("%w: reading the file failed part way (%v); the problems above were found before", ErrCorrupt, p))
		}
	}()
	if verr := db.View(func(tx *bolt.Tx) error {
		if structural == nil {
			for cerr := range tx.Check() {
				problems = append(problems, cerr)
			}
		}
		return checkInvariants(tx, &problems)
	}); verr != nil {
		problems = append(problems, verr)
	}
	return problems, nil
}

func checkInvariants(tx *bolt.Tx, problems *[]error) error {
	records := tx.Bucket(migrations.BucketRecords)
	names := tx.Bucket(migrations.BucketNames)
	if records == nil || names == nil {
		*problems = append(*problems, errors.New("records or names bucket missing"))
		return nil
	}
	holders := map[string]string{}
	byID := map[string]Record{}
	records.ForEach(func(k, v []byte) error {
		rec, err := DecodeRecord(v)
		if err != nil {
			*problems = append(*problems, fmt.Errorf("record %q: %w", k, err))
			return nil
		}
		if string(migrations.RecordKey(rec.ID)) != string(k) {
			*problems = append(*problems, fmt.Errorf("record %q: stored under the key of another ID (its id is %s)", k, rec.ID))
		}
		byID[rec.ID] = rec
		if rec.HoldsName {
			key := string(nameKey(rec.Kind, rec.Name))
			if other, dup := holders[key]; dup {
				*problems = append(*problems, fmt.Errorf("name %q held by two records: %s and %s", key, other, rec.ID))
			}
			holders[key] = rec.ID
		}
		return nil
	})
	names.ForEach(func(k, v []byte) error {
		rec, ok := byID[string(v)]
		switch {
		case !ok:
			*problems = append(*problems, fmt.Errorf("name %q points to missing record %s", k, v))
		case !rec.HoldsName:
			*problems = append(*problems, fmt.Errorf("name %q points to record %s that released it", k, v))
		}
		delete(holders, string(k))
		return nil
	})
	for key, id := range holders {
		*problems = append(*problems, fmt.Errorf("record %s holds name %q but the names index lacks it", id, key))
	}
	return nil
}

// Stats are counters of the committer and of Maintain, for benchmarks and metrics.
type Stats struct {
	Commits        int64 // bbolt transactions committed
	Writes         int64 // record writes and deletes committed
	MaintainPasses int64 // times Maintain looked for due work
}

// Stats returns the journal's counters.
func (j *Journal) Stats() Stats {
	if j.commits == nil {
		return Stats{}
	}
	s := j.commits.stats()
	s.MaintainPasses = j.maintainPasses.Load()
	return s
}

// Failed returns a channel that is closed when a commit fails. From then on every change
// fails with ErrFailed and nothing more is published: the daemon must stop, and its next
// start recovers from the file (fail-stop; see DESIGN §6). A read-only journal never fails.
func (j *Journal) Failed() <-chan struct{} {
	if j.commits == nil {
		return nil
	}
	return j.commits.failed
}

// Err returns the error of the failed commit (errors.Is ErrFailed, and wrapping the
// file's error, such as syscall.ENOSPC), or nil while the journal works.
func (j *Journal) Err() error {
	if j.commits == nil {
		return nil
	}
	j.commits.mu.Lock()
	defer j.commits.mu.Unlock()
	return j.commits.broken
}

// LowSpace returns nil while the journal has room for new creations, and otherwise an
// error (errors.Is ErrLowSpace) that names the file, says why and what to do: the space
// reserve (Options.SpaceReserve) is short and the disk cannot give it back, or the disk
// has less room than the reserve. Each call tops a short reserve up and looks at the disk
// again. Without a reserve it is always nil.
func (j *Journal) LowSpace() error {
	if j.space == nil {
		return nil
	}
	return j.space.check()
}

// newID returns a fresh record ID: 64 lowercase hex digits, the first 32 random, then the
// creation time in nanoseconds (16) and 16 random ones. The random first half is what
// short IDs show; the time keeps records made together together in the file
// (migrations.RecordKey).
func newID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	// The second half starts with the time: see migrations.RecordKey.
	binary.BigEndian.PutUint64(b[16:24], uint64(time.Now().UnixNano()))
	return hex.EncodeToString(b[:])
}

// --- index helpers; callers hold j.mu ---

// writable reports why the journal takes no changes: closed, read-only, or failed.
func (j *Journal) writable() error {
	switch {
	case j.closed:
		return ErrClosed
	case j.commits == nil:
		return fmt.Errorf("journal %s is read-only", j.path)
	}
	return j.commits.err()
}

// change applies mutate to the record of e, refreshes its timestamp and queues the write.
// It returns the queued commit to wait on (nil when lazy).
//
// When the change is published (readers see it, watchers wake): a durable change once
// its commit succeeded, so memory never runs ahead of the file; a commit that fails
// publishes nothing and fails the journal (fail-stop). A lazy change (durable false) is
// one whose loss in a crash is harmless by design (a reservation, a done mark, an undo's
// outcome, a later expiry): it is published at once, unless a durable change of the same
// record is still on its way to disk, in which case it is published with it.
func (j *Journal) change(e *entry, durable bool, mutate func(r *Record)) (*pending, error) {
	if err := j.writable(); err != nil {
		return nil, err
	}
	before := nameKey(e.rec.Kind, e.rec.Name)
	mutate(&e.rec)
	e.rec.Updated = j.opts.Now()
	b, err := encodeRecord(&e.rec)
	if err != nil {
		return nil, err
	}
	e.version++
	w := write{id: e.rec.ID, value: b, entry: e, version: e.version, snapshot: e.rec.Clone(), durable: durable}
	key := nameKey(e.rec.Kind, e.rec.Name)
	if string(key) != string(before) && j.byName[string(before)] == e {
		// Renamed (a claim by a retry under another name): the old name is given up in
		// the same commit that takes the new one.
		delete(j.byName, string(before))
		w.released = nameOp{key: before, id: e.rec.ID, del: true}
	}
	if e.rec.HoldsName {
		j.byName[string(key)] = e
		w.name = nameOp{key: key, id: e.rec.ID, put: true}
	} else if j.byName[string(key)] == e {
		delete(j.byName, string(key))
		w.name = nameOp{key: key, id: e.rec.ID, del: true}
	}
	if durable {
		e.durablePending++
	} else if e.durablePending == 0 {
		j.show(e, w.version, &w.snapshot)
		j.wakeAll()
	}
	return j.commits.enqueue(w, durable), nil
}

// forget deletes a record and its name from the index and the file. Calls that change
// records no longer find it. A durable delete is seen by readers once it is committed, a
// lazy one (see Remove) at once; a delete asked to be lazy while a durable write of the
// record is still pending is made durable, so that the pending write, once published,
// does not show the record again until the delete rides on a later commit.
func (j *Journal) forget(e *entry, durable bool) (*pending, error) {
	if err := j.writable(); err != nil {
		return nil, err
	}
	durable = durable || e.durablePending > 0
	delete(j.byID, e.rec.ID)
	j.unindexIdentity(e)
	key := nameKey(e.rec.Kind, e.rec.Name)
	e.version++
	w := write{id: e.rec.ID, del: true, entry: e, version: e.version, durable: durable}
	if j.byName[string(key)] == e {
		delete(j.byName, string(key))
		w.name = nameOp{key: key, id: e.rec.ID, del: true}
	}
	if durable {
		e.durablePending++
	} else {
		j.show(e, w.version, nil)
		j.wakeAll()
	}
	return j.commits.enqueue(w, durable), nil
}

// published is called by the committer after each successful commit, before its waiters
// return: it publishes the batch's changes in the order they were queued.
func (j *Journal) published(batch []write) {
	j.mu.Lock()
	defer j.mu.Unlock()
	shown := false
	for i := range batch {
		w := &batch[i]
		e := w.entry
		if w.durable {
			e.durablePending--
		}
		if w.del {
			shown = j.show(e, w.version, nil) || shown
		} else {
			shown = j.show(e, w.version, &w.snapshot) || shown
		}
	}
	if shown {
		j.wakeAll()
	}
}

// show publishes version v of e's record (nil: deleted), unless it or a later one is
// shown already; it reports whether it did.
func (j *Journal) show(e *entry, v uint64, rec *Record) bool {
	if v <= e.shownVersion {
		return false
	}
	e.shownVersion = v
	j.shownChildren.remove(e.shown.Parent, e)
	if rec == nil {
		delete(j.shown, e.rec.ID)
	} else {
		e.shown = *rec
		j.shown[e.rec.ID] = e
		j.shownChildren.add(e.shown.Parent, e)
	}
	close(e.changed)
	e.changed = make(chan struct{})
	return true
}

// wakeAll wakes WatchAll's callers and Maintain.
func (j *Journal) wakeAll() {
	close(j.wake)
	j.wake = make(chan struct{})
}

// indexIdentity adds e to the records of its identity, if it has one.
func (j *Journal) indexIdentity(e *entry) {
	if e.rec.Identity != "" {
		j.byIdentity.add(identityKey(e.rec.Kind, e.rec.Identity), e)
	}
}

func (j *Journal) unindexIdentity(e *entry) {
	j.byIdentity.remove(identityKey(e.rec.Kind, e.rec.Identity), e)
}

// entrySets holds sets of entries by a key (an identity, a parent): the journal's
// secondary indexes. The empty key holds nothing.
type entrySets map[string]map[*entry]struct{}

func (m entrySets) add(key string, e *entry) {
	if key == "" {
		return
	}
	if m[key] == nil {
		m[key] = map[*entry]struct{}{}
	}
	m[key][e] = struct{}{}
}

// remove takes e out of key's set, if it is there, and drops a set left empty.
func (m entrySets) remove(key string, e *entry) {
	delete(m[key], e)
	if len(m[key]) == 0 {
		delete(m, key)
	}
}

// hiddenOf returns the hidden record (see Record.Hidden) of an identity that holds a
// name, as queued, or nil. There is at most one: Begin never makes a second.
func (j *Journal) hiddenOf(kind Kind, identity string) *entry {
	for e := range j.byIdentity[identityKey(kind, identity)] {
		if e.rec.HoldsName && e.rec.Hidden() {
			return e
		}
	}
	return nil
}

func (j *Journal) lookup(id string) (*entry, error) {
	e, ok := j.byID[id]
	if !ok {
		return nil, fmt.Errorf("record %s: %w", id, ErrNotFound)
	}
	return e, nil
}

// current returns a copy of the record with this ID as queued (not as published): for
// the journal's own decisions.
func (j *Journal) current(id string) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.lookup(id)
	if err != nil {
		return Record{}, err
	}
	return e.rec.Clone(), nil
}

// wait blocks until p is committed. It does not give up when ctx ends: the change is
// already queued, and returning before it is durable would break the journal's
// promise. A nil p is a lazy write.
func wait(p *pending) error {
	if p == nil {
		return nil
	}
	<-p.done
	return p.err
}
