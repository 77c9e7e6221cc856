package metrics

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestServeTLS serves the metrics over HTTPS with a certificate: a client that trusts it
// reads them, and plain HTTP gets no metrics.
func TestServeTLS(t *testing.T) {
	certFile, keyFile, pool := testenv.SelfSignedCert(t, t.TempDir())
	m := New(nil)
	m.Recovered("cached", 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := m.Serve(ctx, "127.0.0.1:0", &TLSFiles{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	resp, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `crijournal_recovery_records_total{outcome="cached"} 2`; !strings.Contains(string(body), want) {
		t.Errorf("metrics over HTTPS lack %q", want)
	}
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + addr + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "crijournal_") {
			t.Error("plain HTTP to the HTTPS endpoint served metrics")
		}
	}
}

// TestServeTLSBadFiles refuses to start with a key that does not exist, naming the files.
func TestServeTLSBadFiles(t *testing.T) {
	certFile, _, _ := testenv.SelfSignedCert(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "none.key")
	_, err := New(nil).Serve(context.Background(), "127.0.0.1:0", &TLSFiles{CertFile: certFile, KeyFile: missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Serve with a missing key = %v, want an error naming %s", err, missing)
	}
}
