// Package migrations owns the versions of the journal's on-disk schema.
//
// The schema version is a big-endian uint64 stored under key "schema_version" in the
// top-level bucket "meta". Migrations is an ordered list: migration i takes a database at
// version i to version i+1, and version 1 is the initial schema (creating it from an empty
// file is migration 0 -> 1). Run applies every missing migration inside the caller's
// read-write transaction, so a database is either fully migrated or left as it was.
//
// A database whose version is greater than Latest was written by a newer crijournal; Run
// refuses it with ErrNewerSchema rather than guessing, so nothing is lost or overwritten.
package migrations

import (
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Bucket and key names of the schema. They are on disk: never change them, add a
// migration instead.
var (
	BucketMeta    = []byte("meta")
	BucketRecords = []byte("records")
	BucketNames   = []byte("names")
	KeyVersion    = []byte("schema_version")
	// KeyWrittenBy in BucketMeta holds the release of the crijournal that last opened the
	// file for writing, as text ("0.2.0"): the refusal of a newer schema names it. Written
	// since v0.2.0 within schema 2; v0.1.0 neither writes nor reads it, so a file v0.1.0
	// wrote last may name a later release.
	KeyWrittenBy = []byte("written_by")
)

// ErrNewerSchema is returned when the database was written by a newer schema than this
// binary knows.
var ErrNewerSchema = errors.New("database schema is newer than this crijournal")

// ErrReadOnly is returned when a read-only transaction finds a database that needs migrating.
var ErrReadOnly = errors.New("database needs migrating but was opened read-only")

// Migration moves the schema from version From to version From+1.
type Migration struct {
	From        uint64
	Description string
	Apply       func(tx *bolt.Tx) error
}

// Migrations is the ordered list of every schema change. Append, never edit.
var Migrations = []Migration{
	{From: 0, Description: "initial schema: meta, records and names buckets", Apply: initialSchema},
	{From: 1, Description: "records keyed by RecordKey (ID halves swapped), no longer by ID", Apply: rekeyRecords},
}

// RecordKey is the key of a record in BucketRecords (since schema 2): its ID with the two
// halves swapped. An ID the journal makes is 32 random hex digits (what crictl shows of
// it, and what ID prefixes match) followed by the creation time and more random digits,
// so keyed this way the records of creations made together sit together in the file,
// and a commit that carries several of them writes few pages. An ID that is not 64
// characters long is its own key.
func RecordKey(id string) []byte {
	if len(id) != 64 {
		return []byte(id)
	}
	return []byte(id[32:] + id[:32])
}

// Latest is the schema version this binary writes.
func Latest() uint64 { return uint64(len(Migrations)) }

// Version reads the schema version of the database (0 for an empty file).
func Version(tx *bolt.Tx) (uint64, error) {
	meta := tx.Bucket(BucketMeta)
	if meta == nil {
		return 0, nil
	}
	v := meta.Get(KeyVersion)
	if v == nil {
		return 0, nil
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("schema version has %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// WrittenBy returns the release recorded under KeyWrittenBy, "" when none is.
func WrittenBy(tx *bolt.Tx) string {
	if meta := tx.Bucket(BucketMeta); meta != nil {
		return string(meta.Get(KeyWrittenBy))
	}
	return ""
}

// SetWrittenBy records release under KeyWrittenBy (inside a writable tx, after Run).
func SetWrittenBy(tx *bolt.Tx, release string) error {
	meta, err := tx.CreateBucketIfNotExists(BucketMeta)
	if err != nil {
		return fmt.Errorf("create meta bucket: %w", err)
	}
	if string(meta.Get(KeyWrittenBy)) == release {
		return nil
	}
	return meta.Put(KeyWrittenBy, []byte(release))
}

// Run brings the database to Latest inside tx. It returns the version found and the
// version left. A read-only tx is accepted when no migration is needed.
func Run(tx *bolt.Tx) (from, to uint64, err error) {
	from, err = Version(tx)
	if err != nil {
		return 0, 0, err
	}
	if from > Latest() {
		return from, from, fmt.Errorf("schema version %d, this binary knows up to %d: %w", from, Latest(), ErrNewerSchema)
	}
	if from == Latest() {
		return from, from, nil
	}
	if !tx.Writable() {
		return from, from, fmt.Errorf("schema version %d, want %d: %w", from, Latest(), ErrReadOnly)
	}
	for v := from; v < Latest(); v++ {
		m := Migrations[v]
		if err := m.Apply(tx); err != nil {
			return from, v, fmt.Errorf("migration %d -> %d (%s): %w", v, v+1, m.Description, err)
		}
		if err := setVersion(tx, v+1); err != nil {
			return from, v, err
		}
	}
	return from, Latest(), nil
}

func setVersion(tx *bolt.Tx, v uint64) error {
	meta, err := tx.CreateBucketIfNotExists(BucketMeta)
	if err != nil {
		return fmt.Errorf("create meta bucket: %w", err)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return meta.Put(KeyVersion, b[:])
}

// rekeyRecords moves every record from its ID to RecordKey(ID). Schema 1 keyed records by
// their ID; keys that are not IDs (damage) are left for the journal's check to report.
func rekeyRecords(tx *bolt.Tx) error {
	records := tx.Bucket(BucketRecords)
	if records == nil {
		return errors.New("records bucket missing")
	}
	type move struct{ from, to, value []byte }
	var moves []move
	if err := records.ForEach(func(k, v []byte) error {
		if to := RecordKey(string(k)); string(to) != string(k) {
			moves = append(moves, move{append([]byte(nil), k...), to, append([]byte(nil), v...)})
		}
		return nil
	}); err != nil {
		return err
	}
	for _, m := range moves {
		if err := records.Delete(m.from); err != nil {
			return fmt.Errorf("rekey record %s: %w", m.from, err)
		}
		if err := records.Put(m.to, m.value); err != nil {
			return fmt.Errorf("rekey record %s: %w", m.from, err)
		}
	}
	return nil
}

func initialSchema(tx *bolt.Tx) error {
	for _, name := range [][]byte{BucketMeta, BucketRecords, BucketNames} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %q: %w", name, err)
		}
	}
	return nil
}
