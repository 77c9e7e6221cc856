package test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestKubeletCheckpointRestore drives forensic container checkpointing (KEP 2008) end
// to end through a real kubelet: its checkpoint API (POST
// /checkpoint/{namespace}/{pod}/{container} on its port, the ContainerCheckpoint
// feature gate) has the daemon write an archive of a counting container to the
// kubelet's checkpoints directory; the archive made into a checkpoint image as CRI-O's
// documentation says (one layer of its files, annotated
// io.kubernetes.cri-o.annotations.checkpoint.name: the kubelet takes no path as an
// image) and pushed; a static pod whose container's image is that image then counts on
// from the checkpoint. CRIU must work (make test-vm).
func TestKubeletCheckpointRestore(t *testing.T) {
	t.Parallel()
	requireCriuWorks(t)
	requireKubelet(t)
	d, reg := startRestoreDaemon(t)
	port := freeLoopbackPort(t)
	// CRIU's dump and restore take tens of seconds in the emulated VM: the CRI calls'
	// deadline is stretched with the test's waits.
	k := startKubelet(t, d, kubeletOptions{runtimeRequestTimeout: testenv.Scaled(20 * time.Second), config: map[string]any{
		"enableServer": true,
		"port":         port,
		"featureGates": map[string]bool{"ContainerCheckpoint": true},
	}})

	k.writeStaticPod(t, "counter", staticPod("counter", kubeletContainer{name: "counter", command: counter}))
	k.waitPodRunning(t, "counter", 2*time.Minute)
	pod, _ := k.pod(t, "counter")
	orig := pod.Status.ContainerStatuses[0].runtimeID()
	d.waitLog(t, orig, "count 5", 30*time.Second)

	// The kubelet's checkpoint API, as `curl -k -X POST
	// https://<node>:10250/checkpoint/<namespace>/<pod>/<container>` calls it: it
	// answers {"items": [<archive>]}, under <root-dir>/checkpoints. Its timeout
	// parameter (seconds) is the CRI call's deadline when longer than the kubelet's.
	client := http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/checkpoint/default/%s/counter?timeout=%d", port, k.podName("counter"), int(testenv.Scaled(30*time.Second).Seconds()))
	var archive string
	testenv.Eventually(t, time.Minute, time.Second, func() error {
		resp, err := client.Post(url, "", nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %s: %s", url, resp.Status, body)
		}
		var out struct {
			Items []string `json:"items"`
		}
		if err := json.Unmarshal(body, &out); err != nil || len(out.Items) != 1 {
			return fmt.Errorf("POST %s answered %s (%v)", url, body, err)
		}
		archive = out.Items[0]
		return nil
	})
	atCheckpoint, _ := d.lastCount(t, orig)
	if dir := filepath.Join(k.rootDir, "checkpoints"); filepath.Dir(archive) != dir || !strings.HasPrefix(filepath.Base(archive), "checkpoint-"+k.podName("counter")+"_default-counter-") {
		t.Errorf("the kubelet's archive is %s, want checkpoint-<pod>_<namespace>-<container>-<time>.tar in %s", archive, dir)
	}
	t.Logf("the kubelet's checkpoint: %s, taken at count %d or before", archive, atCheckpoint)

	image := reg.push(t, checkpointImage(t, archive, true), "e2e/counter-checkpoint", "1.0")
	k.writeStaticPod(t, "restored", staticPod("restored", kubeletContainer{name: "counter", image: image, command: counter}))
	k.waitPodRunning(t, "restored", 3*time.Minute)
	pod, _ = k.pod(t, "restored")
	id := pod.Status.ContainerStatuses[0].runtimeID()
	d.waitLog(t, id, "count ", 30*time.Second)
	first := 0
	for _, m := range countRE.FindAllStringSubmatch(d.mustCrictl(t, "logs", id), 1) {
		fmt.Sscan(m[1], &first)
	}
	if first < 2 || first > atCheckpoint+1 {
		t.Errorf("the restored pod's counter began at %d, want the count after the checkpoint's (the original had logged %d by then)", first, atCheckpoint)
	}
	t.Logf("the restored pod's counter began at %d (the checkpoint was taken at count %d or before)", first, atCheckpoint)
	d.waitLog(t, id, fmt.Sprintf("count %d", first+5), 30*time.Second)
	if _, ones := d.lastCount(t, id); ones != 0 {
		t.Errorf("the restored pod's counter counted 1: it started again instead of going on")
	}
	if pod, _ := k.pod(t, "restored"); pod.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the kubelet restarted the restored container: %s", pod.describe())
	}

	k.removeStaticPod(t, "restored")
	k.removeStaticPod(t, "counter")
	k.waitPodGone(t, "restored", 2*time.Minute)
	k.waitPodGone(t, "counter", 2*time.Minute)
	d.waitNoContainers(t, 2*time.Minute)
	d.requireRestoreDirs(t, "once the pods are gone")
}
