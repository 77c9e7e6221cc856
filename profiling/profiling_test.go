package profiling

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServeRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "192.0.2.1:0", "example.com:0"} {
		t.Run(addr, func(t *testing.T) {
			s, err := Serve(context.Background(), addr)
			if err == nil {
				s.Close()
				t.Fatalf("Serve(%q) served on %s, want ErrNotLoopback", addr, s.Addr())
			}
			if !errors.Is(err, ErrNotLoopback) {
				t.Fatalf("Serve(%q) = %v, want ErrNotLoopback", addr, err)
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeProfilesUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr()
	if code, body := get(t, base+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("index: %d %q, want 200 listing the profiles", code, body)
	}
	if code, body := get(t, base+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("goroutine profile: %d %.80q", code, body)
	}
	// Only the profiles: nothing else of the process is served here.
	if code, _ := get(t, base+"/metrics"); code != http.StatusNotFound {
		t.Fatalf("/metrics: %d, want 404", code)
	}
	cancel()
	select {
	case <-s.served:
	case <-time.After(5 * time.Second):
		t.Fatal("the server still serves after its context ended")
	}
	if _, err := (&http.Client{Timeout: time.Second}).Get(base + "/debug/pprof/"); err == nil {
		t.Fatal("a request succeeded after the server stopped")
	}
	if err := s.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Close after the context ended: %v", err)
	}
}
