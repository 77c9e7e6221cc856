package test

import (
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
)

// usernsPod writes a pod configuration with the given user namespace options
// (namespace_options.userns_options, as the kubelet sends for hostUsers: false).
func usernsPod(t *testing.T, name string, userns map[string]any) string {
	t.Helper()
	uid := randomHex(t, 16)
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname": "e2e",
		"labels":   map[string]string{"e2e": "crijournal"},
		"linux": map[string]any{"security_context": map[string]any{
			"namespace_options": map[string]any{"userns_options": userns},
		}},
	}
	return writePodJSON(t, "pod-"+sanitize(name)+"-"+uid[:8], cfg)
}

// idMapping is one IDMapping of userns_options, as crictl reads it.
func idMapping(container, host, length int) []map[string]any {
	return []map[string]any{{"container_id": container, "host_id": host, "length": length}}
}

// TestUsernsRefused checks, through crictl, the user namespace requests a pod
// sandbox refuses before anything is made: modes CONTAINER and TARGET, and
// mappings that are not one range from container ID 0, are InvalidArgument on
// every handler; mode POD on a handler that does not support user namespaces
// (Debian's runc 1.1, without idmapped mounts, as a second handler; and, while
// crijournal does not implement them, every handler) is FailedPrecondition
// naming the handler. Status tells which handlers support them, and what each
// runtime says it can do (runtimeFeatures) follows `runc features`. Nothing is
// left behind.
func TestUsernsRefused(t *testing.T) {
	t.Parallel()
	debianRunc := "/usr/sbin/runc"
	if !isExecutable(debianRunc) {
		t.Skipf("%s (Debian's runc) is not installed", debianRunc)
	}
	d := startDaemon(t, daemonOptions{secondHandler: "debian", secondPath: debianRunc})

	valid := map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
		"uids": idMapping(0, 1000, 100000), "gids": idMapping(0, 1000, 100000)}
	for _, tc := range []struct {
		name    string
		handler string
		userns  map[string]any
		want    []string // in crictl's error
	}{
		{"container", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_CONTAINER)}, []string{"InvalidArgument", "mode CONTAINER"}},
		{"target", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_TARGET)}, []string{"InvalidArgument", "mode TARGET"}},
		{"two-mappings", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
			"uids": append(idMapping(0, 1000, 100000), idMapping(0, 2000, 100000)...), "gids": idMapping(0, 1000, 100000)},
			[]string{"InvalidArgument", "exactly one uid mapping"}},
		{"no-root", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
			"uids": idMapping(1, 1000, 100000), "gids": idMapping(1, 1000, 100000)},
			[]string{"InvalidArgument", "must map container ID 0"}},
		{"debian-runc", "debian", valid, []string{"FailedPrecondition", "debian", "does not support user namespaces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"runp"}
			if tc.handler != "" {
				args = append(args, "--runtime", tc.handler)
			}
			args = append(args, usernsPod(t, "userns-"+tc.name, tc.userns))
			out, stderr, err := d.crictl(t, args...)
			if err == nil {
				t.Fatalf("crictl runp of a pod with userns_options %v succeeded (%s), want a refusal", tc.userns, strings.TrimSpace(out))
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("crictl runp refused with %q, want it to say %q", strings.TrimSpace(stderr), w)
				}
			}
		})
	}
	if out := strings.TrimSpace(d.mustCrictl(t, "pods", "-q")); out != "" {
		t.Errorf("crictl pods lists %q after the refusals, want nothing", out)
	}

	// What each handler's runtime says, and what Status tells the kubelet.
	var reported map[string]map[string]bool
	info := d.info(t)
	mustDecode(t, "runtimeFeatures", info["runtimeFeatures"], &reported)
	if reported["debian"]["userNamespaces"] {
		t.Errorf("runtimeFeatures.debian.userNamespaces is true for %s, which has no idmapped mounts", debianRunc)
	}
	if (config.Config{}).RuntimePath("runc") == config.BundledRunc && !reported["runc"]["userNamespaces"] {
		t.Errorf("runtimeFeatures.runc.userNamespaces is false for the project's runc %s", config.BundledRunc)
	}
	type handler struct {
		Name     string          `json:"name"`
		Features map[string]bool `json:"features"`
	}
	var handlers []handler
	mustDecode(t, "runtimeHandlers", info["runtimeHandlers"], &handlers)
	for _, h := range handlers {
		if h.Features["userNamespaces"] || h.Features["user_namespaces"] {
			t.Errorf("handler %q reports user namespaces, which crijournal does not implement yet", h.Name)
		}
	}
	d.stopClean(t)
}
