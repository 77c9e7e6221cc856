package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// crictlTemplate runs `crictl <verb> -o go-template --template tmpl id` and returns what
// it printed, trimmed.
func (d *daemon) crictlTemplate(t *testing.T, verb, id, tmpl string) string {
	t.Helper()
	return strings.TrimSpace(d.mustCrictl(t, verb, "-o", "go-template", "--template", tmpl, id))
}

// sameNamespace reports whether two namespace files (a pin, /proc/<pid>/ns/<kind>) are
// one namespace.
func sameNamespace(t *testing.T, a, b string) bool {
	t.Helper()
	var sa, sb syscall.Stat_t
	if err := syscall.Stat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// TestInspectInfo is issue 51's item 5: crictl inspect and inspectp answer, in their
// verbose info, what operators' scripts read from containerd (its ContainerInfo and
// SandboxInfo: pid, config, runtimeSpec; the guides' `nsenter -t $(crictl inspect -o
// go-template --template '{{.info.pid}}' ID) -n ...`), read here through the real crictl's
// go-template, and the journal's own view stays beside them.
func TestInspectInfo(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	// A pod sharing its pid namespace, so that it has a pause process.
	pod := d.editedPod(t, "inspect-info", func(cfg map[string]any) {
		namespaceOptions(cfg)["pid"] = int(runtimeapi.NamespaceMode_POD)
	})
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	d.pull(t, testImage)
	id := d.run(t, podID, containerConfig(t, "c", 0, sleeper, func(cfg map[string]any) {
		namespaceOptions(cfg)["pid"] = int(runtimeapi.NamespaceMode_POD)
	}), pod)
	d.waitLog(t, id, "hello-from-container", 30*time.Second)

	// The container: its init process, the one the guides nsenter.
	pid := d.crictlTemplate(t, "inspect", id, "{{.info.pid}}")
	// sh has exec'd its last command.
	cmdline, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
	if err != nil || string(cmdline) != "sleep\x003600\x00" {
		t.Fatalf("crictl inspect {{.info.pid}} = %q: its command line is %q (%v), want the container's sleep 3600", pid, cmdline, err)
	}
	ip := d.inspectp(t, podID).Status.Network.IP
	out, err := exec.Command("nsenter", "-t", pid, "-n", "ip", "-o", "-4", "addr", "show", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " "+ip+"/") {
		t.Errorf("nsenter -t {{.info.pid}} -n ip addr: %v\n%s\nwant the pod's IP %s", err, out, ip)
	}
	for tmpl, want := range map[string]string{
		"{{.info.sandboxID}}":                        podID,
		"{{.info.config.metadata.name}}":             "c",
		"{{index .info.runtimeSpec.process.args 2}}": sleeper[2],
		"{{.info.runtimeSpec.root.path}}":            d.crictlTemplate(t, "inspect", id, "{{.info.rootfs}}"),
		"{{.info.journal.state}}":                    "created",
	} {
		if got := d.crictlTemplate(t, "inspect", id, tmpl); got != want {
			t.Errorf("crictl inspect %s = %q, want %q", tmpl, got, want)
		}
	}

	// The sandbox: its pause process, network namespace and a runtime spec naming it.
	pausePID := d.crictlTemplate(t, "inspectp", podID, "{{.info.pid}}")
	if cmdline, err := os.ReadFile(filepath.Join("/proc", pausePID, "cmdline")); err != nil || !strings.Contains(string(cmdline), "pause\x00"+podID) {
		t.Errorf("crictl inspectp {{.info.pid}} = %q: its command line is %q (%v), want the pod's pause process", pausePID, cmdline, err)
	} else if !sameNamespace(t, filepath.Join("/proc", pausePID, "ns", "pid"), filepath.Join("/proc", pid, "ns", "pid")) {
		t.Errorf("the pause process %s and the container's process %s are not in one pid namespace", pausePID, pid)
	}
	netnsPath := d.crictlTemplate(t, "inspectp", podID, "{{.info.netNamespacePath}}")
	specNet := d.crictlTemplate(t, "inspectp", podID, `{{range .info.runtimeSpec.linux.namespaces}}{{if eq .type "network"}}{{.path}}{{end}}{{end}}`)
	if netnsPath == "" || specNet != netnsPath {
		t.Errorf("crictl inspectp: netNamespacePath %q, the runtime spec's network namespace %q: want one path", netnsPath, specNet)
	} else if !sameNamespace(t, netnsPath, filepath.Join("/proc", pid, "ns", "net")) {
		t.Errorf("the sandbox's network namespace %s is not the container's", netnsPath)
	}
	for tmpl, want := range map[string]string{
		"{{.info.config.metadata.name}}": "inspect-info",
		"{{.info.runtimeSpec.hostname}}": "e2e",
		"{{.info.journal.state}}":        "created",
	} {
		if got := d.crictlTemplate(t, "inspectp", podID, tmpl); got != want {
			t.Errorf("crictl inspectp %s = %q, want %q", tmpl, got, want)
		}
	}

	// A stopped container has no process: pid 0.
	d.mustCrictl(t, "stop", "-t", "0", id)
	if got := d.crictlTemplate(t, "inspect", id, "{{.info.pid}}"); got != "0" {
		t.Errorf("crictl inspect {{.info.pid}} of a stopped container = %q, want 0", got)
	}
	d.removeCtr(t, id)
	d.removePod(t, podID)
	d.stopClean(t)
}
