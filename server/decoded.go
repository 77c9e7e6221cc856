package server

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/crijournal/crijournal/journal"
)

// decodeCache keeps the decoded objects of records (the JSON object and the protobuf
// config in it) for the List calls the kubelet makes every second, so that a relist of
// n records decodes only what changed since the last one. An entry answers only for the
// very object it was decoded from (compared byte for byte), so a changed object is
// decoded again. What it hands out is shared between calls: read it, never change it.
// The zero value is ready to use.
type decodeCache[T any] struct {
	mu      sync.Mutex
	entries map[string]decodedObject[T]
}

type decodedObject[T any] struct {
	raw json.RawMessage
	v   T
}

// get returns rec's object decoded by decode, from the cache when it holds this object.
// Decode errors are not cached.
func (c *decodeCache[T]) get(rec journal.Record, decode func(journal.Record) (T, error)) (T, error) {
	if v, ok := c.cached(rec); ok {
		return v, nil
	}
	v, err := decode(rec)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]decodedObject[T]{}
	}
	c.entries[rec.ID] = decodedObject[T]{raw: rec.Object, v: v}
	c.mu.Unlock()
	return v, nil
}

// view is get without the store: a miss decodes rec and leaves the cache as it was, so
// that only the List calls, whose keepOnly bounds it, fill the cache.
func (c *decodeCache[T]) view(rec journal.Record, decode func(journal.Record) (T, error)) (T, error) {
	if v, ok := c.cached(rec); ok {
		return v, nil
	}
	return decode(rec)
}

// cached returns the entry of rec when it holds rec's very object.
func (c *decodeCache[T]) cached(rec journal.Record) (T, bool) {
	c.mu.Lock()
	e, ok := c.entries[rec.ID]
	c.mu.Unlock()
	if ok && bytes.Equal(e.raw, rec.Object) {
		return e.v, true
	}
	var none T
	return none, false
}

// keepOnly drops the entries of every record not in recs: called after a List that saw
// every live record of the kind, it bounds the cache by the records that exist.
func (c *decodeCache[T]) keepOnly(recs []journal.Record) {
	live := make(map[string]struct{}, len(recs))
	for _, r := range recs {
		live[r.ID] = struct{}{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.entries {
		if _, ok := live[id]; !ok {
			delete(c.entries, id)
		}
	}
}

// listedSandbox decodes a sandbox record for a List call, through the server's cache.
func (s *Server) listedSandbox(rec journal.Record) (sandbox, error) {
	sb, err := s.sandboxCache.get(rec, decodeSandbox)
	sb.rec = rec
	return sb, err
}

// listedContainer decodes a container record for a List call, through the server's cache.
func (s *Server) listedContainer(rec journal.Record) (container, error) {
	c, err := s.containerCache.get(rec, decodeContainer)
	c.rec = rec
	return c, err
}
