package journal

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/migrations"
)

// NewerSchemaError refuses a file whose schema is newer than this binary knows: a later
// release wrote it (a rollback to an older release). It names both releases and both
// schemas; nothing was written to the file. errors.Is(err, migrations.ErrNewerSchema).
type NewerSchemaError struct {
	Path string
	// Schema is the file's schema version, Known the latest this binary knows.
	Schema, Known uint64
	// WrittenBy is the release the file names (migrations.KeyWrittenBy), "" if none.
	WrittenBy string
	// Release is this binary's release (Options.Release), "" if not given.
	Release string
}

func (e *NewerSchemaError) Error() string {
	writer := "a newer crijournal (it does not name its release)"
	if e.WrittenBy != "" {
		writer = "crijournal " + e.WrittenBy
	}
	self := "this crijournal"
	if e.Release != "" {
		self += " " + e.Release
	}
	return fmt.Sprintf("open journal %s: written by %s with journal schema %d; %s knows schemas up to %d: %v. "+
		"Nothing was written: upgrade to the release that wrote it (or a later one) again, or move it aside to start afresh "+
		"(the records of this node's pods and containers are then lost)",
		e.Path, writer, e.Schema, self, e.Known, migrations.ErrNewerSchema)
}

func (e *NewerSchemaError) Unwrap() error { return migrations.ErrNewerSchema }

// newerSchemaError makes the refusal of tx's file, whose schema Run found newer.
func newerSchemaError(tx *bolt.Tx, path, release string) error {
	schema, err := migrations.Version(tx)
	if err != nil {
		return fmt.Errorf("open journal %s: %w", path, err)
	}
	return &NewerSchemaError{Path: path, Schema: schema, Known: migrations.Latest(),
		WrittenBy: migrations.WrittenBy(tx), Release: release}
}

// CheckSchema refuses, with a *NewerSchemaError, a journal file that a newer release
// wrote, before the daemon makes anything else (storage, runtimes' directories): so that
// an older release started on a newer release's state writes nothing. It opens path
// read-only and writes nothing itself. Any other trouble (no file, a file another
// process holds locked for longer than lockTimeout, damage) passes: Open reports it.
func CheckSchema(path, release string, lockTimeout time.Duration) (err error) {
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	// Damage bbolt panics on, or reads past the end of a truncated file fault on (a fault
	// is fatal unless turned into a panic): Open says what it is.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: lockTimeout})
	if err != nil {
		return nil
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		if _, _, err := migrations.Run(tx); errors.Is(err, migrations.ErrNewerSchema) {
			return newerSchemaError(tx, path, release)
		}
		return nil
	})
}
