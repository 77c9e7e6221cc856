package server

import "sync"

// idQueue hands IDs from the callers that queue them, which never block, to the one
// goroutine that works through them: it waits on wake, then takes what is queued. One
// signal stands for every add made before the next take.
type idQueue struct {
	mu   sync.Mutex
	ids  []string
	wake chan struct{} // buffered (1)
}

func newIDQueue() *idQueue { return &idQueue{wake: make(chan struct{}, 1)} }

// add queues id and wakes the working goroutine.
func (q *idQueue) add(id string) {
	q.mu.Lock()
	q.ids = append(q.ids, id)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // already signalled: that wake-up takes this one too
	}
}

// take returns the queued IDs, oldest first, and empties the queue.
func (q *idQueue) take() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := q.ids
	q.ids = nil
	return ids
}
