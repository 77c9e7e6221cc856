package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Helpers of the kubelet's static pods (see harness_kubelet_test.go for the kubelet
// itself): their manifests, the kubelet's view of them (the read-only port's /pods), and
// waits for what the kubelet and the daemon show of them.

// podName is the name the kubelet gives the static pod of manifest name: the
// manifest's metadata.name, a dash and the node's name.
func (k *kubelet) podName(name string) string { return name + "-" + k.nodeName }

// kubeletContainer is one container of staticPod.
type kubeletContainer struct {
	name    string
	command []string // default stopsOnTERM
	image   string   // default testImage
}

// stopsOnTERM runs until SIGTERM, on which it exits 0 at once (a plain sleep as PID 1 of
// its pid namespace ignores SIGTERM, and the kubelet then waits the grace period out).
var stopsOnTERM = []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"}

// staticPod returns the manifest (a v1 Pod in JSON) of a pod named name in namespace
// default with the containers (the test image, imagePullPolicy IfNotPresent: the daemon
// holds it after startContainerDaemon), DNS policy Default (no cluster DNS here) and a
// grace period of 5 s.
func staticPod(name string, containers ...kubeletContainer) string {
	var ctrs []map[string]any
	for _, c := range containers {
		if c.command == nil {
			c.command = stopsOnTERM
		}
		if c.image == "" {
			c.image = testImage
		}
		ctrs = append(ctrs, map[string]any{
			"name":            c.name,
			"image":           c.image,
			"imagePullPolicy": "IfNotPresent",
			"command":         c.command,
		})
	}
	pod := map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"name": name, "namespace": "default", "labels": map[string]string{"e2e": "crijournal"}},
		"spec": map[string]any{
			"containers":                    ctrs,
			"dnsPolicy":                     "Default",
			"restartPolicy":                 "Always",
			"terminationGracePeriodSeconds": 5,
		},
	}
	b, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// manifestPath is the file of the static pod name.
func (k *kubelet) manifestPath(name string) string {
	return filepath.Join(k.manifestDir, name+".json")
}

// writeStaticPod writes (or replaces) the manifest of the static pod name (YAML or
// JSON, such as staticPod returns) atomically: the kubelet never reads half of it (it
// skips files whose name starts with a dot).
func (k *kubelet) writeStaticPod(t *testing.T, name, manifest string) {
	t.Helper()
	tmp := filepath.Join(k.manifestDir, "."+name+".tmp")
	writeFile(t, tmp, manifest, 0o644)
	if err := os.Rename(tmp, k.manifestPath(name)); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet: static pod %s written (pod %s)", name, k.podName(name))
}

// removeStaticPod removes the manifest of the static pod name: the kubelet stops the
// pod and removes its containers at once, its sandbox at its next container garbage
// collection (every minute, from its start).
func (k *kubelet) removeStaticPod(t *testing.T, name string) {
	t.Helper()
	if err := os.Remove(k.manifestPath(name)); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet: static pod %s removed", name)
}

// kubeletPod is the part of a v1 Pod from the kubelet's /pods the tests read.
type kubeletPod struct {
	Metadata struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Containers []struct {
			Name string `json:"name"`
		} `json:"containers"`
	} `json:"spec"`
	Status struct {
		Phase      string `json:"phase"`
		Reason     string `json:"reason"`
		Message    string `json:"message"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"conditions"`
		ContainerStatuses []kubeletContainerStatus `json:"containerStatuses"`
	} `json:"status"`
}

// kubeletContainerStatus is a v1 ContainerStatus: exactly one of the states is set.
type kubeletContainerStatus struct {
	Name         string `json:"name"`
	ContainerID  string `json:"containerID"` // "cri-o://<ID>" or the like
	Ready        bool   `json:"ready"`
	RestartCount int    `json:"restartCount"`
	State        struct {
		Running *struct {
			StartedAt string `json:"startedAt"`
		} `json:"running"`
		Waiting *struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"waiting"`
		Terminated *struct {
			ExitCode int    `json:"exitCode"`
			Reason   string `json:"reason"`
			Message  string `json:"message"`
		} `json:"terminated"`
	} `json:"state"`
}

// runtimeID returns the container's runtime ID (containerID without its scheme).
func (c kubeletContainerStatus) runtimeID() string {
	_, id, _ := strings.Cut(c.ContainerID, "://")
	return id
}

// running reports whether every container of the pod runs, in the kubelet's view.
func (p kubeletPod) running() bool {
	if p.Status.Phase != "Running" || len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running == nil {
			return false
		}
	}
	return true
}

// describe sums up the pod's status in one line, for failures and logs.
func (p kubeletPod) describe() string {
	s := fmt.Sprintf("%s/%s uid %s phase %q", p.Metadata.Namespace, p.Metadata.Name, p.Metadata.UID, p.Status.Phase)
	if p.Status.Reason != "" || p.Status.Message != "" {
		s += fmt.Sprintf(" (%s: %s)", p.Status.Reason, p.Status.Message)
	}
	for _, c := range p.Status.Conditions {
		if c.Status != "True" {
			s += fmt.Sprintf("; %s %s %s %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		switch st := c.State; {
		case st.Running != nil:
			s += fmt.Sprintf("; %s running since %s (restarts %d, %s)", c.Name, st.Running.StartedAt, c.RestartCount, c.ContainerID)
		case st.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s (restarts %d)", c.Name, st.Waiting.Reason, st.Waiting.Message, c.RestartCount)
		case st.Terminated != nil:
			s += fmt.Sprintf("; %s terminated: %d %s %s (restarts %d)", c.Name, st.Terminated.ExitCode, st.Terminated.Reason, st.Terminated.Message, c.RestartCount)
		default:
			s += fmt.Sprintf("; %s in no state", c.Name)
		}
	}
	return s
}

// getPods reads the read-only port's /pods: the pods the kubelet is to run, with their
// status.
func (k *kubelet) getPods() ([]kubeletPod, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/pods", k.readOnlyPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /pods: %s: %s", resp.Status, body)
	}
	var list struct {
		Items []kubeletPod `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET /pods: %v\n%s", err, body)
	}
	return list.Items, nil
}

// pods returns the kubelet's pods (/pods on its read-only port), failing the test when it
// does not answer.
func (k *kubelet) pods(t *testing.T) []kubeletPod {
	t.Helper()
	pods, err := k.getPods()
	if err != nil {
		t.Fatalf("kubelet /pods: %v", err)
	}
	return pods
}

// pod returns the kubelet's static pod of manifest name, if it has one.
func (k *kubelet) pod(t *testing.T, name string) (kubeletPod, bool) {
	t.Helper()
	for _, p := range k.pods(t) {
		if p.Metadata.Name == k.podName(name) {
			return p, true
		}
	}
	return kubeletPod{}, false
}

// waitPodRunning waits until every container of the static pod name runs in the
// kubelet's view, and returns how long that took from the call.
func (k *kubelet) waitPodRunning(t *testing.T, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	last := "not listed"
	for {
		if alive, _ := k.running(); !alive {
			t.Fatalf("the kubelet is not running (%s) while waiting for pod %s", k.lastExit(), k.podName(name))
		}
		if p, ok := k.pod(t, name); ok {
			if p.running() {
				took := time.Since(start)
				t.Logf("kubelet: pod %s running after %v: %s", k.podName(name), took.Round(time.Millisecond), p.describe())
				return took
			}
			last = p.describe()
		}
		if time.Since(start) > within {
			t.Fatalf("pod %s not running in the kubelet's view within %v: %s", k.podName(name), within, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPodGone waits until the kubelet no longer lists the static pod name (its
// manifest removed, the pod stopped), and returns how long that took from the call.
func (k *kubelet) waitPodGone(t *testing.T, name string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		p, ok := k.pod(t, name)
		if !ok {
			took := time.Since(start)
			t.Logf("kubelet: pod %s gone after %v", k.podName(name), took.Round(time.Millisecond))
			return took
		}
		if time.Since(start) > within {
			t.Fatalf("the kubelet still lists pod %s %v later: %s", k.podName(name), within, p.describe())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNoContainers waits until the daemon lists no container (crictl ps -a), and
// returns how long that took from the call.
func (d *daemon) waitNoContainers(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	return d.waitListEmpty(t, within, "ps", "-a", "-q")
}

// waitNoPods waits until the daemon lists no pod (the kubelet removes the sandboxes of
// deleted pods at its container garbage collection, every minute), and returns how long
// that took from the call.
func (d *daemon) waitNoPods(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	return d.waitListEmpty(t, within, "pods", "-q")
}

// waitListEmpty polls a crictl listing (args) until it lists nothing, and returns how
// long that took from the call.
func (d *daemon) waitListEmpty(t *testing.T, within time.Duration, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	command := "crictl " + strings.Join(args, " ")
	for {
		stdout, stderr, err := d.crictlTimeout(30*time.Second, args...)
		if err != nil {
			t.Fatalf("%s: %v: %s", command, err, stderr)
		}
		ids := strings.Fields(stdout)
		if len(ids) == 0 {
			took := time.Since(start)
			t.Logf("%s lists nothing after %v", command, took.Round(time.Millisecond))
			return took
		}
		if time.Since(start) > within {
			t.Fatalf("%s still lists %v %v later", command, ids, within)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
