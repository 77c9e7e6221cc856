package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// preflight reads every page reachable from the file's root, in this goroutine, before the
// file is opened for writing.
//
// Why: bbolt panics on some damaged pages, and with NoFreelistSync it rebuilds the
// freelist at open by walking the tree in a goroutine of its own, where a panic cannot be
// recovered and kills the daemon. Walking the same tree here first, with faults turned into
// panics (a truncated file faults on mmap reads) and panics turned into ErrCorrupt, lets
// Open refuse a damaged file with a message instead.
func preflight(path string, opts Options) (err error) {
	info, statErr := os.Stat(path)
	if statErr != nil || info.Size() == 0 {
		return nil // a new file
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, ReadOnly: true})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("open journal %s: %w (another crijournal holds it; stop it, or use its socket)", path, ErrInUse)
	case err != nil:
		return corruptError(path, err)
	}
	defer db.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = corruptError(path, fmt.Errorf("%v", p))
		}
	}()
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return walkBucket(string(name), b)
		})
	}); err != nil {
		return corruptError(path, err)
	}
	return nil
}

// walkBucket visits every key and value of b and its nested buckets, checking that keys
// ascend.
func walkBucket(path string, b *bolt.Bucket) error {
	c := b.Cursor()
	var prev []byte
	var sum byte
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("bucket %s: keys out of order at %q", path, k)
		}
		prev = append(prev[:0], k...)
		if v == nil {
			nested := b.Bucket(k)
			if nested == nil {
				return fmt.Errorf("bucket %s: key %q has no value and is not a bucket", path, k)
			}
			if err := walkBucket(path+"/"+string(k), nested); err != nil {
				return err
			}
			continue
		}
		for _, x := range v { // touch every byte, overflow pages included
			sum ^= x
		}
	}
	_ = sum
	return nil
}
