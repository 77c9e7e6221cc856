package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Loopback HTTP helpers of the port-forward tests: free ports, GETs, and waits for an answer.

// freePorts returns n TCP ports on loopback that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// httpGet fetches / on a local port and returns the body, trimmed.
func httpGet(port int) (string, error) {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %s: %s", resp.Status, body)
	}
	return strings.TrimSpace(string(body)), nil
}

// waitHTTP retries a GET until it answers want (the server in the pod may still be
// starting).
func waitHTTP(t *testing.T, port int, want string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		if body, err := httpGet(port); err != nil || body != want {
			return fmt.Errorf("GET on forwarded port %d: %q, %v; want %q", port, body, err, want)
		}
		return nil
	})
}

func requireHTTP(t *testing.T, port int, want string) {
	t.Helper()
	if body, err := httpGet(port); err != nil || body != want {
		t.Fatalf("GET on forwarded port %d: %q, %v; want %q", port, body, err, want)
	}
}
