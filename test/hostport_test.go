package test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Host ports: a pod's port mappings go to CNI as the portMappings capability, and
// the test network's portmap plugin forwards the host port to the pod (see
// writeCNIConfig). The attach step records them, so DEL passes the same ones and
// portmap removes its rules.

// TestHostPort: a pod with a host port mapped to its web server's port answers on
// 127.0.0.1:<host port> from the node (as critest asks), the attach step recorded the
// mapping, and after the removal no NAT rule of portmap names the sandbox.
func TestHostPort(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("iptables-save"); err != nil {
		t.Skip("hostPort needs iptables (Debian: apt-get install -y iptables)")
	}
	d, _ := startContainerDaemon(t, daemonOptions{})
	hostPort := 20000 + rand.IntN(10000) // apart from other tests' ports and critest's 12000
	pod := d.editedPod(t, "hostport", func(cfg map[string]any) {
		cfg["port_mappings"] = []map[string]any{
			{"container_port": 8080, "host_port": hostPort},
			{"container_port": 9090}, // no host port: not passed to CNI
		}
	})
	podID := d.mustRunp(t, pod)
	web := containerConfig(t, "web", 0, []string{"sh", "-c",
		"mkdir -p /www && echo hostport-ok > /www/index.html && exec httpd -f -p 8080 -h /www"})
	d.run(t, podID, web, pod)

	url := fmt.Sprintf("http://127.0.0.1:%d/index.html", hostPort)
	body, err := getWithin(url, 20*time.Second)
	if err != nil || strings.TrimSpace(body) != "hostport-ok" {
		t.Fatalf("GET %s: %q, %v; want the pod's page through its host port\nnat table:\n%s", url, body, err, natRules(t))
	}

	var recorded string
	for _, r := range d.liveRecords(t) {
		for _, s := range r.Steps {
			if r.ID == podID && s.Kind == "cni-attach" {
				recorded = s.Args["port_mappings"]
			}
		}
	}
	if want := fmt.Sprintf(`[{"hostPort":%d,"containerPort":8080,"protocol":"tcp"}]`, hostPort); recorded != want {
		t.Errorf("the attach step recorded port mappings %q, want %q", recorded, want)
	}
	if rules := rulesNaming(natRules(t), podID); len(rules) == 0 {
		t.Errorf("no NAT rule names sandbox %s while its host port works: the check after removal would prove nothing", podID)
	}

	d.removePod(t, podID)
	if rules := rulesNaming(natRules(t), podID); len(rules) > 0 {
		t.Errorf("NAT rules of sandbox %s left after stopp and rmp:\n%s", podID, strings.Join(rules, "\n"))
	}
	if _, err := getWithin(url, time.Second); err == nil {
		t.Errorf("GET %s still answers after the pod's removal", url)
	}
	d.stopClean(t)
}

// getWithin GETs url until it answers 200 or within has passed, and returns the body.
func getWithin(url string, within time.Duration) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	var body string
	err := testenv.Poll(within, 200*time.Millisecond, func() (err error) {
		body, err = func() (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
			if err != nil {
				return "", err
			}
			resp, err := client.Do(req)
			if err != nil {
				return "", err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status)
			}
			return string(b), err
		}()
		return err
	})
	return body, err
}

// natRules returns the node's NAT table (iptables-save -t nat).
func natRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save -t nat: %v\n%s", err, out)
	}
	return string(out)
}

// rulesNaming returns the lines of an iptables-save text that name the sandbox: portmap
// comments its rules with the container ID, and its per-sandbox chain (CNI-DN-...) is
// only reachable through such a rule.
func rulesNaming(rules, sandboxID string) []string {
	var out []string
	for line := range strings.Lines(rules) {
		if strings.Contains(line, sandboxID) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}
