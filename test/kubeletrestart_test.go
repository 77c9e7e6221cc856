package test

import (
	"fmt"
	"testing"
	"time"
)

// kubeletPodJSON writes a pod configuration shaped as the kubelet sends it: its
// io.kubernetes.pod.* labels, and the pod's annotations with the kubelet's own
// (config.source, and config.seen: when this kubelet process first saw the pod).
func kubeletPodJSON(t *testing.T, name, uid, seen string) string {
	t.Helper()
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname": name,
		"labels": map[string]string{
			"e2e": "crijournal", "io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": "e2e", "io.kubernetes.pod.uid": uid,
		},
		"annotations": map[string]string{
			"kubernetes.io/config.seen":   seen,
			"kubernetes.io/config.source": "api",
			"example.com/owner":           "e2e",
		},
	}
	return writePodJSON(t, fmt.Sprintf("pod-%s-%s", sanitize(name), sanitize(seen)), cfg)
}

// TestCacheSurvivesKubeletRestart guards the fingerprint against the kubelet's own
// bookkeeping: a RunPodSandbox times out, the creation finishes and is cached; the kubelet
// restarts meanwhile, so its retry carries a new kubernetes.io/config.seen. The retry
// gets the cached sandbox, with no second CNI ADD.
func TestCacheSurvivesKubeletRestart(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	uid := randomHex(t, 16)
	before := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
	created := d.timeOut(t, kubeletPodJSON(t, "restarted-kubelet", uid, before))
	d.waitNetworkDone(t, created, 2*slowADD)

	after := time.Now().UTC().Format(time.RFC3339Nano)
	d.requireRetryGetsCached(t, kubeletPodJSON(t, "restarted-kubelet", uid, after), created, "the retry of a restarted kubelet (new config.seen)")
}
