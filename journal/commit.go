package journal

import (
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/migrations"
)

// committer is the single writer of the file. Writes are queued in index order; as soon as
// a durable write is queued, its loop takes everything queued, commits it in one
// transaction, and starts again at once (group commit without a delay: a lone creation
// never waits for company). Lazy writes alone do not start a commit: they ride on the next
// durable one, or are flushed after lazyFlushDelay.
type committer struct {
	db *bolt.DB

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []write
	waiters []*pending
	closing bool
	broken  error
	// lazyDue is set by the flush timer started when a lazy write finds nothing queued.
	lazyDue   bool
	lazyTimer *time.Timer
	done      chan struct{}

	nCommits, nWrites int64
	observe           func(time.Duration, int)
	// publish is called with each committed batch before its waiters are released.
	publish func([]write)
	// space, when not nil, is topped up after each commit that grew the file, before
	// the commit's waiters return.
	space *space

	// txMu is held during each write transaction; Check holds it to keep writers out,
	// since bbolt's check is not safe alongside a writer.
	txMu sync.Mutex

	// failed is closed when the first commit fails (broken is set then).
	failed chan struct{}
	// beforeCommit, when set (by tests), runs before each commit; an error it returns
	// fails that commit as a failed write of the file would.
	beforeCommit func() error
}

// write is one record put or delete, with the matching names/ change, and what to publish
// once it is committed (see Journal.change).
type write struct {
	id    string
	value []byte
	del   bool
	name  nameOp
	// released is a name the record gave up for name (a rename), deleted first.
	released nameOp

	entry    *entry
	version  uint64
	snapshot Record // the record as written (not for deletes)
	durable  bool
}

type nameOp struct {
	key      []byte
	id       string
	put, del bool
}

// pending is a durable write's promise: done is closed once its commit has finished.
type pending struct {
	done chan struct{}
	err  error
}

// lazyFlushDelay bounds how long a lazy write waits for a durable one to ride on.
const lazyFlushDelay = 50 * time.Millisecond

func newCommitter(db *bolt.DB, observe func(time.Duration, int), publish func([]write), space *space) *committer {
	c := &committer{db: db, done: make(chan struct{}), observe: observe, publish: publish, space: space, failed: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	go c.loop()
	return c
}

// enqueue queues w; when durable, the returned pending is resolved by the commit that
// carries it (lazy writes ride on the next commit and return nil).
func (c *committer) enqueue(w write, durable bool) *pending {
	c.mu.Lock()
	defer c.mu.Unlock()
	var p *pending
	if durable {
		p = &pending{done: make(chan struct{})}
		if c.broken != nil || c.closing {
			p.err = c.brokenErr()
			close(p.done)
			return p
		}
		c.waiters = append(c.waiters, p)
	}
	if !durable && len(c.queue) == 0 && c.lazyTimer == nil {
		c.lazyTimer = time.AfterFunc(lazyFlushDelay, func() {
			c.mu.Lock()
			c.lazyDue = true
			c.cond.Signal()
			c.mu.Unlock()
		})
	}
	c.queue = append(c.queue, w)
	c.cond.Signal()
	return p
}

// err returns the error of the failed commit, nil while commits succeed.
func (c *committer) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

func (c *committer) brokenErr() error {
	if c.broken != nil {
		return c.broken
	}
	return ErrClosed
}

func (c *committer) loop() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.waiters) == 0 && !c.closing && !(c.lazyDue && len(c.queue) > 0) {
			c.cond.Wait()
		}
		if len(c.queue) == 0 && c.closing {
			c.mu.Unlock()
			return
		}
		batch, waiters := c.queue, c.waiters
		c.queue, c.waiters = nil, nil
		c.lazyDue = false
		if c.lazyTimer != nil {
			c.lazyTimer.Stop()
			c.lazyTimer = nil
		}
		broken := c.broken
		c.mu.Unlock()

		err := broken
		if err == nil {
			start := time.Now()
			c.txMu.Lock()
			if c.beforeCommit != nil {
				err = c.beforeCommit()
			}
			if err == nil {
				err = c.db.Update(func(tx *bolt.Tx) error { return apply(tx, batch) })
			}
			c.txMu.Unlock()
			if err == nil && c.observe != nil {
				c.observe(time.Since(start), len(batch))
			}
			if err == nil && c.space != nil {
				// Before the waiters return, so that a change once durable has its
				// reserve back, or the journal is low on space.
				c.space.committed(c.db)
			}
		}
		c.mu.Lock()
		if err != nil && c.broken == nil {
			// What was queued is not on disk and is never published; every later
			// change is refused (fail-stop): the daemon stops, and its next start
			// recovers from the file.
			c.broken = fmt.Errorf("%w: %w", ErrFailed, err)
			err = c.broken
			close(c.failed)
		}
		if err == nil {
			c.nCommits++
			c.nWrites += int64(len(batch))
		}
		c.mu.Unlock()
		if err == nil && c.publish != nil {
			c.publish(batch)
		}
		for _, p := range waiters {
			p.err = err
			close(p.done)
		}
	}
}

func apply(tx *bolt.Tx, batch []write) error {
	records := tx.Bucket(migrations.BucketRecords)
	names := tx.Bucket(migrations.BucketNames)
	for _, w := range batch {
		var err error
		if w.del {
			err = records.Delete(migrations.RecordKey(w.id))
		} else {
			err = records.Put(migrations.RecordKey(w.id), w.value)
		}
		if err != nil {
			return fmt.Errorf("write record %s: %w", w.id, err)
		}
		for _, op := range []nameOp{w.released, w.name} {
			if err := applyName(names, op); err != nil {
				return fmt.Errorf("write name %q: %w", op.key, err)
			}
		}
	}
	return nil
}

func applyName(names *bolt.Bucket, op nameOp) error {
	switch {
	case op.put:
		return names.Put(op.key, []byte(op.id))
	case op.del:
		// Only remove the name if it still points at this record.
		if string(names.Get(op.key)) == op.id {
			return names.Delete(op.key)
		}
	}
	return nil
}

func (c *committer) close() {
	c.mu.Lock()
	c.closing = true
	c.cond.Signal()
	c.mu.Unlock()
	<-c.done
}

func (c *committer) stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Commits: c.nCommits, Writes: c.nWrites}
}
