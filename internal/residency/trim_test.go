package residency

import (
	"runtime"
	"sync"
	"testing"
	"weak"
)

// TestTrimFreesPooledBuffers: what a sync.Pool held when Trim was called is freed by it,
// though one collection only moves it to the pool's victim cache.
func TestTrimFreesPooledBuffers(t *testing.T) {
	var pool sync.Pool
	buf := new([1 << 20]byte)
	held := weak.Make(buf)
	pool.Put(buf)
	buf = nil
	if err := Trim(); err != nil {
		t.Fatal(err)
	}
	if held.Value() != nil {
		t.Error("a buffer put in a sync.Pool before Trim is still live after it")
	}
	runtime.KeepAlive(&pool)
}
