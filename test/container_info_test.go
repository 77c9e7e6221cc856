package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestContainerStatusDetails checks, with crictl inspect, what ContainerStatus
// tells beyond the state: the process's user (uid, gid, supplemental groups,
// for both supplemental groups policies, matching `id -G` in the container),
// the resources as created and as updated by crictl update, and the stop
// signal (which crictl stop then sends). It also covers three small CRI rules:
// a pod whose log directory does not exist gets it (0755) so the container's
// log is written; stopping an unknown container succeeds; run_as_group
// without a user is InvalidArgument and creates nothing.
func TestContainerStatusDetails(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})

	// A pod whose log directory is not there yet.
	uid := randomHex(t, 16)
	logDir := filepath.Join(d.podLogDir, "not-yet", "e2e_details_"+uid)
	pod := writePodJSON(t, "pod-details-"+uid[:8], map[string]any{
		"metadata":      map[string]any{"name": "details", "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname":      "e2e",
		"log_directory": logDir,
		"labels":        map[string]string{"e2e": "crijournal"},
		"linux": map[string]any{"cgroup_parent": d.podCgroupParent(uid), "security_context": map[string]any{
			"namespace_options": map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)},
		}},
	})
	podID := d.mustRunp(t, pod)

	// nobody (65534) is a member of staff (50) in the image's /etc/group.
	for _, tc := range []struct {
		policy runtimeapi.SupplementalGroupsPolicy
		groups []int64
	}{
		{runtimeapi.SupplementalGroupsPolicy_Merge, []int64{50, 1234, 65534}},
		{runtimeapi.SupplementalGroupsPolicy_Strict, []int64{1234, 65534}},
	} {
		name := "user-" + strings.ToLower(tc.policy.String())
		id := d.run(t, podID, containerConfig(t, name, 0, sleeper, withMemoryLimit(64<<20), withSecurity(map[string]any{
			"run_as_user":                map[string]any{"value": 65534},
			"supplemental_groups":        []int64{1234},
			"supplemental_groups_policy": int(tc.policy),
		})), pod)
		st := d.inspectDetails(t, id)
		u := st.User.Linux
		groups := slices.Sorted(slices.Values(u.SupplementalGroups))
		if u.UID != 65534 || u.GID != 65534 || !slices.Equal(groups, tc.groups) {
			t.Errorf("%s: crictl inspect user %v, want uid 65534 gid 65534 groups %v", name, u, tc.groups)
		}
		var inContainer []int64
		for f := range strings.FieldsSeq(d.execSync(t, id, "id", "-G")) {
			var g int64
			if err := json.Unmarshal([]byte(f), &g); err != nil {
				t.Fatalf("id -G printed %q", f)
			}
			inContainer = append(inContainer, g)
		}
		if slices.Sort(inContainer); !slices.Equal(inContainer, tc.groups) {
			t.Errorf("%s: id -G in the container says %v, want %v", name, inContainer, tc.groups)
		}
		if got := st.Resources.Linux.MemoryLimitInBytes; got != 64<<20 {
			t.Errorf("%s: crictl inspect memory limit %d, want the created 64 MiB", name, got)
		}
		if tc.policy == runtimeapi.SupplementalGroupsPolicy_Merge {
			d.mustCrictl(t, "update", "--memory", "134217728", id)
			if got := d.inspectDetails(t, id).Resources.Linux.MemoryLimitInBytes; got != 128<<20 {
				t.Errorf("%s: after crictl update --memory 128Mi, crictl inspect says memory limit %d", name, got)
			}
			if st.StopSignal != "SIGNAL_SIGTERM" {
				t.Errorf("%s: stop signal %q, want SIGNAL_SIGTERM (none configured)", name, st.StopSignal)
			}
		}
		d.removeCtr(t, id)
	}

	// The log directory was made for the pod, and the log was written.
	fi, err := os.Stat(logDir)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("pod log directory %s: %v, %v; want a 0755 directory made by the runtime", logDir, fi, err)
	}

	// A stop signal from the config is reported and sent.
	trapper := []string{"sh", "-c", `trap "echo got-usr1; exit 7" USR1; echo trapping; while true; do sleep 1; done`}
	id := d.run(t, podID, containerConfig(t, "usr1", 0, trapper, func(cfg map[string]any) {
		cfg["stop_signal"] = int(runtimeapi.Signal_SIGNAL_SIGUSR1)
	}), pod)
	d.waitLog(t, id, "trapping", 10*time.Second)
	if got := d.inspectDetails(t, id).StopSignal; got != "SIGNAL_SIGUSR1" {
		t.Errorf("crictl inspect stop signal %q, want SIGNAL_SIGUSR1", got)
	}
	d.mustCrictl(t, "stop", "-t", "30", id)
	d.requireExited(t, id, 7)
	d.mustCrictl(t, "rm", id)

	// Stopping an unknown container is success (the CRI: idempotent).
	d.mustCrictl(t, "stop", randomID(t))

	// run_as_group without run_as_user or run_as_username.
	before := d.ps(t, true)
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "group-only", 0, sleeper, withSecurity(map[string]any{
		"run_as_group": map[string]any{"value": 1234},
	})), pod)
	requireCode(t, "crictl create with run_as_group but no user", err, stderr, "InvalidArgument")
	requireListed(t, "after the refused create", "crictl ps -a -q", d.ps(t, true), before)

	d.removePod(t, podID)
}

// ctrDetails is what crictl inspect -o json shows of a container's user,
// resources and stop signal (int64 values are JSON strings there).
type ctrDetails struct {
	User struct {
		Linux struct {
			UID                int64    `json:"uid,string"`
			GID                int64    `json:"gid,string"`
			SupplementalGroups []int64  `json:"-"`
			Groups             []string `json:"supplementalGroups"`
		} `json:"linux"`
	} `json:"user"`
	Resources struct {
		Linux struct {
			MemoryLimitInBytes int64 `json:"memoryLimitInBytes,string"`
		} `json:"linux"`
	} `json:"resources"`
	StopSignal string `json:"stopSignal"`
}

// inspectDetails returns a container's user, resources and stop signal from
// crictl inspect -o json.
func (d *daemon) inspectDetails(t *testing.T, id string) ctrDetails {
	t.Helper()
	out := d.mustCrictl(t, "inspect", "-o", "json", id)
	var doc struct {
		Status ctrDetails `json:"status"`
	}
	mustDecode(t, "crictl inspect "+id, []byte(out), &doc)
	for _, g := range doc.Status.User.Linux.Groups {
		n, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			t.Fatalf("crictl inspect %s: supplemental group %q", id, g)
		}
		doc.Status.User.Linux.SupplementalGroups = append(doc.Status.User.Linux.SupplementalGroups, n)
	}
	return doc.Status
}
