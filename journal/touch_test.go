package journal

import (
	"testing"
	"time"
)

// TestTouchNeverPullsTheExpiryIn backs Touch's comment: a toucher whose deadline is
// sooner than the current expiry leaves it alone (and is still told a cached record holds
// the name), a later one pushes it, and a name held by no cached record is not touched.
func TestTouchNeverPullsTheExpiryIn(t *testing.T) {
	clock := newFakeClock()
	var u undoLog
	j, _ := testJournal(t, Options{Now: clock.Now, CacheTTL: time.Minute, Registry: u.registry(kindA)})
	rec := begin(t, j, "pod", clock.Now())
	step(t, j, rec.ID, kindA, "1")
	if j.Touch(KindSandbox, "pod", clock.Now()) {
		t.Error("Touch of a record still creating reported a touch")
	}
	j.ready(rec.ID, 1)
	cached, _ := j.answer(rec.ID, false)
	if !j.Touch(KindSandbox, "pod", clock.Now().Add(-time.Hour)) {
		t.Error("Touch with an old deadline did not report the cached record")
	}
	if got, _ := j.Get(rec.ID); !got.Expiry.Equal(cached.Expiry) {
		t.Errorf("expiry moved from %v to %v: Touch pulled it in or pushed it for nothing", cached.Expiry, got.Expiry)
	}
	clock.Advance(10 * time.Second)
	if !j.Touch(KindSandbox, "pod", time.Time{}) {
		t.Error("Touch without a deadline did not report the cached record")
	}
	if got, _ := j.Get(rec.ID); !got.Expiry.Equal(clock.Now().Add(time.Minute)) {
		t.Errorf("expiry %v, want a full TTL from now, %v", got.Expiry, clock.Now().Add(time.Minute))
	}
	if j.Touch(KindSandbox, "other", clock.Now()) {
		t.Error("Touch of a free name reported a touch")
	}
}
