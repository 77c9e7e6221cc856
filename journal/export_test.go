package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Calls only the package's own tests make: the daemon settles a creation in one commit
// (Settle), finds records by ID (Get, List) and retries undos in Maintain.

// ready stores the finished object of a creation whose steps are all done (state ready)
// and returns once that is durable: from then on a crash no longer throws the work away,
// recovery caches it for the kubelet's retry. The step marks queued before it ride on the
// same commit.
func (j *Journal) ready(id string, object any) error {
	raw, err := json.Marshal(object)
	if err != nil {
		return fmt.Errorf("ready %s: encode object: %w", id, err)
	}
	j.mu.Lock()
	e, err := j.finishing("ready", id)
	if err != nil {
		j.mu.Unlock()
		return err
	}
	p, err := j.change(e, true, func(r *Record) {
		r.State = StateReady
		r.Stage = ""
		r.Object = raw
	})
	j.mu.Unlock()
	if err != nil {
		return err
	}
	return wait(p)
}

// getByName returns a copy of the record holding a name, as published.
func (j *Journal) getByName(kind Kind, name string) (Record, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.byName[string(nameKey(kind, name))]
	if !ok {
		return Record{}, fmt.Errorf("%s %q: %w", kind, name, ErrNotFound)
	}
	return e.shown.Clone(), nil
}

// retryUndos runs again the rollback of every undoing record that has a failed undo due,
// and of records left undoing or removing by a crash (none in progress in this process).
func (j *Journal) retryUndos(ctx context.Context) (int, error) {
	_, due, _ := j.dueWork(j.opts.Now(), nil)
	var errs []error
	for _, id := range due {
		if err := j.retry(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return len(due), errors.Join(errs...)
}

// Intent commits one step's intent (Intents of one step): the package's tests take steps
// one at a time.
func (j *Journal) Intent(id, stage string, kind StepKind, args map[string]string) (int, error) {
	return j.Intents(id, Intended{Kind: kind, Stage: stage, Args: args})
}
