package test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// TestSandboxLifecycle runs a pod sandbox through runp, pods, inspectp,
// stopp and rmp, on the pod network and on the host network, and checks
// what it makes on the node at each step.
func TestSandboxLifecycle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		hostNetwork bool
	}{
		{"pod network", false},
		{"host network", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			uid := randomHex(t, 16)
			pod := podConfig(t, "lifecycle", "e2e", uid, 0, tc.hostNetwork)

			id := d.mustRunp(t, pod)
			d.requirePods(t, "after runp", id)
			st := d.requireState(t, id, "SANDBOX_READY")
			if m := st.Status.Metadata; m.Name != "lifecycle" || m.Namespace != "e2e" || m.UID != uid || m.Attempt != 0 {
				t.Errorf("inspectp %s: metadata %+v, want name lifecycle, namespace e2e, uid %s, attempt 0", id, m, uid)
			}

			if tc.hostNetwork {
				if _, err := os.Lstat(d.netnsPin(id)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("host-network sandbox %s has a network namespace pin %s (stat: %v)", id, d.netnsPin(id), err)
				}
				if allocs := d.ipamAllocations(t); len(allocs) != 0 {
					t.Errorf("host-network sandbox: IP allocations %v, want none", allocs)
				}
				if adds := d.addedIDs(t); len(adds) != 0 {
					t.Errorf("host-network sandbox: CNI ADD was called for %v", adds)
				}
			} else {
				ip := st.Status.Network
				if ip == nil || net.ParseIP(ip.IP) == nil {
					t.Fatalf("inspectp %s: no pod IP (network %+v)", id, ip)
				}
				_, subnet, _ := net.ParseCIDR(d.subnet)
				if !subnet.Contains(net.ParseIP(ip.IP)) {
					t.Fatalf("inspectp %s: IP %s is not in the pod network %s", id, ip.IP, d.subnet)
				}
				if !isNamespace(d.netnsPin(id)) {
					t.Fatalf("network namespace pin %s is not a namespace", d.netnsPin(id))
				}
				addr := d.inNetns(t, id, "ip", "-o", "addr", "show", "eth0")
				if !strings.Contains(addr, " inet "+ip.IP+"/24 ") {
					t.Errorf("eth0 in the sandbox's namespace lacks %s/24 that inspectp reports:\n%s", ip.IP, addr)
				}
				if owner := d.ipamAllocations(t)[ip.IP]; owner != id {
					t.Errorf("host-local allocation of %s belongs to %q, want %s", ip.IP, owner, id)
				}
				d.requireReachable(t, ip.IP)
			}
			d.assertNoLeaks(t, id)

			d.mustCrictl(t, "stopp", id)
			d.requireState(t, id, "SANDBOX_NOTREADY")
			// StopPodSandbox reclaims network resources (CRI).
			for addrIP, owner := range d.ipamAllocations(t) {
				if owner == id {
					t.Errorf("after stopp, %s is still allocated to %s", addrIP, id)
				}
			}
			if ports := d.bridgePorts(t); len(ports) != 0 {
				t.Errorf("after stopp, interfaces still on the bridge: %v", ports)
			}
			d.mustCrictl(t, "stopp", id) // idempotent
			d.requireState(t, id, "SANDBOX_NOTREADY")
			d.requirePods(t, "a stopped sandbox is still listed", id)

			d.mustCrictl(t, "rmp", id)
			d.requirePods(t, "after rmp")
			_, stderr, err := d.crictl(t, "inspectp", id)
			requireCode(t, "inspectp of a removed sandbox", err, stderr, "NotFound")
			// crictl rmp asks for the status first and stops at NotFound:
			// call RemovePodSandbox itself.
			d.requireRemoveRPC(t, id, "removed already: idempotent")
			d.requireRemoveRPC(t, randomID(t), "an unknown ID: success per the CRI")
			d.assertNoLeaks(t)

			d.stopClean(t)
		})
	}
}

// TestBadRequests sends invalid RunPodSandbox requests and operations on
// unknown IDs: each gets the right gRPC code and leaves nothing behind.
// Invalid configurations go straight to the CRI socket, since crictl refuses
// some itself (no metadata, name or namespace) and fills in a missing uid;
// those crictl passes on are sent through crictl too.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	cri := d.cri(t)
	const uid = "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f"
	meta := func(name, ns, uid string) *runtimeapi.PodSandboxMetadata {
		return &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid}
	}
	for _, tc := range []struct {
		name      string
		meta      *runtimeapi.PodSandboxMetadata
		viaCrictl bool
	}{
		{"no metadata", nil, false},
		{"no name", meta("", "e2e", uid), false},
		{"no namespace", meta("bad", "", uid), false},
		{"no uid", meta("bad", "e2e", ""), false},
		{"name with a slash", meta("a/b", "e2e", uid), true},
		{"name ../../etc", meta("../../etc", "e2e", uid), true},
		{"name ..", meta("..", "e2e", uid), true},
		{"namespace with a slash", meta("bad", "kube/system", uid), true},
		{"namespace ..", meta("bad", "..", uid), true},
		{"uid with a slash", meta("bad", "e2e", "../"+uid), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := cri.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{
				Config: &runtimeapi.PodSandboxConfig{Metadata: tc.meta, Hostname: "bad"},
			})
			if code := status.Code(err); code != codes.InvalidArgument {
				t.Errorf("RunPodSandbox with %s: code %v (%v, sandbox %q), want InvalidArgument", tc.name, code, err, resp.GetPodSandboxId())
			}
			if tc.viaCrictl {
				pod := writePodJSON(t, "bad-"+sanitize(tc.name), map[string]any{
					"metadata": map[string]any{"name": tc.meta.Name, "namespace": tc.meta.Namespace, "uid": tc.meta.Uid},
					"hostname": "bad",
				})
				_, stderr, err := d.runp(t, pod)
				requireCode(t, "crictl runp with "+tc.name, err, stderr, "InvalidArgument")
			}
			d.requirePods(t, "after a rejected runp")
			if calls := d.cniCalls(t); len(calls) != 0 {
				t.Errorf("a rejected runp called the CNI plugin: %v", calls)
			}
			d.assertNoLeaks(t)
		})
	}

	t.Run("unknown ID", func(t *testing.T) {
		unknown := randomID(t)
		_, stderr, err := d.crictl(t, "inspectp", unknown)
		requireCode(t, "inspectp of an unknown ID", err, stderr, "NotFound")
		// StopPodSandbox of an unknown ID: success or NotFound (both are
		// fine for the kubelet), nothing else.
		if _, stderr, err := d.crictl(t, "stopp", unknown); err != nil && !strings.Contains(stderr, "NotFound") {
			t.Errorf("stopp of an unknown ID: %v, want success or NotFound\nstderr: %s", err, stderr)
		}
		// RemovePodSandbox of an unknown ID is success (CRI: idempotent).
		d.requireRemoveRPC(t, unknown, "an unknown ID")
		d.requirePods(t, "after operations on an unknown ID")
	})

	d.stopClean(t)
}

// TestRestartKeepsSandboxes restarts the daemon under a created sandbox, by
// SIGTERM and by SIGKILL: the sandbox is still listed, ready, with the same
// network, and then stops and is removed cleanly.
func TestRestartKeepsSandboxes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		stopWith func(d *daemon, t *testing.T)
	}{
		{"SIGTERM", (*daemon).stop},
		{"SIGKILL", (*daemon).kill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			pod := podConfig(t, "survivor", "e2e", randomHex(t, 16), 0, false)
			id := d.mustRunp(t, pod)
			before := d.requireState(t, id, "SANDBOX_READY")
			if before.Status.Network == nil || before.Status.Network.IP == "" {
				t.Fatalf("inspectp %s: no pod IP", id)
			}
			ip := before.Status.Network.IP

			tc.stopWith(d, t)
			recs := d.records(t)
			if len(recs) != 1 || recs[0].ID != id || recs[0].State != journal.StateCreated {
				var got []string
				for _, r := range recs {
					got = append(got, describeRecord(r))
				}
				t.Fatalf("journal after %s: %q, want one created record %s", tc.name, got, id)
			}
			d.checkJournal(t)

			d.restart(t)
			d.requirePods(t, "after the restart", id)
			after := d.requireState(t, id, "SANDBOX_READY")
			if after.Status.Network == nil || after.Status.Network.IP != ip {
				t.Errorf("after the restart inspectp %s reports network %+v, want IP %s", id, after.Status.Network, ip)
			}
			if !isNamespace(d.netnsPin(id)) {
				t.Fatalf("after the restart the network namespace pin %s is gone", d.netnsPin(id))
			}
			if addr := d.inNetns(t, id, "ip", "-o", "addr", "show", "eth0"); !strings.Contains(addr, " inet "+ip+"/24 ") {
				t.Errorf("after the restart eth0 lacks %s/24:\n%s", ip, addr)
			}
			d.requireReachable(t, ip)
			d.assertNoLeaks(t, id)
			if adds := d.addedIDs(t); !slices.Equal(adds, []string{id}) {
				t.Errorf("CNI ADD calls %v, want one for %s", adds, id)
			}

			d.removePod(t, id)
			d.requirePods(t, "after stopp and rmp")
			d.stopClean(t)
		})
	}
}

// TestNetworkFailures makes the CNI plugin fail: a failed ADD rolls the
// creation back at once; a failed DEL fails the stop (the kubelet retries
// it); a failed DEL during a removal does not keep the name, and is retried
// in the background until it succeeds.
func TestNetworkFailures(t *testing.T) {
	t.Parallel()

	t.Run("ADD fails: the creation is rolled back", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{})
		pod := podConfig(t, "failing", "e2e", randomHex(t, 16), 0, false)
		d.failCNI(t, "ADD", true)
		_, stderr, err := d.runp(t, pod)
		if err == nil {
			t.Fatal("runp succeeded although CNI ADD failed")
		}
		if !strings.Contains(stderr, "injected failure") {
			t.Errorf("runp's error does not carry the CNI plugin's message (%q):\n%s", "injected failure", stderr)
		}
		d.requirePods(t, "after the failed runp")
		adds := d.addedIDs(t)
		if len(adds) != 1 {
			t.Fatalf("CNI ADD calls %v, want one", adds)
		}
		if calls := d.cniCalls(t); !slices.Contains(calls, cniCall{"DEL", adds[0]}) {
			t.Errorf("the failed ADD of %s was not undone with a DEL (calls %v)", adds[0], calls)
		}
		d.assertNoLeaks(t)

		// The name is free again.
		d.failCNI(t, "ADD", false)
		id := d.mustRunp(t, pod)
		d.requireState(t, id, "SANDBOX_READY")
		d.removePod(t, id)
		d.stopClean(t)
	})

	t.Run("DEL fails: stop fails until it succeeds", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{})
		id := d.mustRunp(t, podConfig(t, "failing", "e2e", randomHex(t, 16), 0, false))
		d.failCNI(t, "DEL", true)
		if _, stderr, err := d.crictl(t, "stopp", id); err == nil {
			t.Errorf("stopp succeeded although CNI DEL failed: the network may be left behind")
		} else if !strings.Contains(stderr, "injected failure") {
			t.Errorf("stopp's error does not carry the CNI plugin's message:\n%s", stderr)
		}
		d.failCNI(t, "DEL", false)
		d.mustCrictl(t, "stopp", id)
		d.requireState(t, id, "SANDBOX_NOTREADY")
		d.assertNoLeaks(t, id)
		d.mustCrictl(t, "rmp", id)
		d.requirePods(t, "after rmp")
		d.stopClean(t)
	})

	t.Run("DEL fails during remove: the name is released, the undo retried", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{})
		pod := podConfig(t, "failing", "e2e", randomHex(t, 16), 0, false)
		old := d.mustRunp(t, pod)
		d.failCNI(t, "DEL", true)
		d.requireRemoveRPC(t, old, "CNI DEL fails: removed for the client, the undo retried later")
		d.requirePods(t, "after the removal")
		_, stderr, err := d.crictl(t, "inspectp", old)
		requireCode(t, "inspectp of a removed sandbox", err, stderr, "NotFound")

		// The failed undo does not hold the name: the same pod can be made
		// again meanwhile.
		id := d.mustRunp(t, pod)
		if id == old {
			t.Fatalf("runp after the removal returned the removed sandbox %s", old)
		}
		if owners := d.ipamAllocations(t); !slices.Contains(slices.Collect(maps.Values(owners)), old) {
			t.Fatalf("the IP of %s was released although every CNI DEL failed (allocations %v)", old, owners)
		}

		// The failed undo is in the journal, without the name, and is
		// retried across a restart.
		d.stop(t)
		var undoing []journal.Record
		for _, r := range d.records(t) {
			if r.ID == old {
				undoing = append(undoing, r)
			}
		}
		if len(undoing) != 1 || undoing[0].HoldsName || len(undoing[0].FailedUndos()) == 0 {
			t.Fatalf("journal record of %s whose DEL failed: %v, want one that does not hold the name, with a failed undo", old, undoing)
		}
		d.checkJournal(t)
		d.restart(t)
		d.requirePods(t, "after the restart", id)
		d.failCNI(t, "DEL", false)
		d.waitNoLeaks(t, expiryWait, id)

		d.removePod(t, id)
		d.stopClean(t)
	})
}

// TestSandboxAPI checks what the kubelet reads back through the CRI: Version,
// PodSandboxStatus (labels, annotations, creation time, and the journal's
// view under verbose), ListPodSandbox with each of its filters, and a stopped
// sandbox that stays stopped, with its markers in the journal, across a
// restart.
func TestSandboxAPI(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	cri := d.cri(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)

	v, err := cri.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "crijournal" || v.RuntimeApiVersion != "v1" || v.RuntimeVersion == "" {
		t.Errorf("Version = %+v, %v; want runtime crijournal, a version, API v1", v, err)
	}

	run := func(name, app string) string {
		t.Helper()
		before := time.Now()
		resp, err := cri.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: randomHex(t, 16)},
			Hostname:    name,
			Labels:      map[string]string{"app": app, "e2e": "crijournal"},
			Annotations: map[string]string{"note": "annotated " + name},
			Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}}},
		}})
		if err != nil {
			t.Fatalf("RunPodSandbox %s: %v", name, err)
		}
		st, err := cri.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: resp.PodSandboxId, Verbose: true})
		if err != nil {
			t.Fatalf("PodSandboxStatus %s: %v", name, err)
		}
		s := st.GetStatus()
		if s.Labels["app"] != app || s.Annotations["note"] != "annotated "+name {
			t.Errorf("status of %s: labels %v annotations %v", name, s.Labels, s.Annotations)
		}
		if created := time.Unix(0, s.CreatedAt); created.Before(before.Add(-time.Second)) || created.After(time.Now()) {
			t.Errorf("status of %s: created at %v, not during the call (%v to now)", name, created, before)
		}
		var info struct {
			Namespaces map[string]string `json:"namespaces"`
			Journal    struct {
				State string           `json:"state"`
				Steps []map[string]any `json:"steps"`
			} `json:"journal"`
		}
		if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
			t.Fatalf("verbose status of %s: info %q: %v", name, st.Info, err)
		}
		if info.Journal.State != "created" || len(info.Journal.Steps) < 2 || !isNamespace(info.Namespaces["net"]) {
			t.Errorf("verbose status of %s: %s; want the created record, its steps, the pinned network namespace", name, st.Info["info"])
		}
		return resp.PodSandboxId
	}
	a, b, c := run("api-a", "one"), run("api-b", "one"), run("api-c", "two")
	if _, err := cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: c}); err != nil {
		t.Fatal(err)
	}

	list := func(f *runtimeapi.PodSandboxFilter) []string {
		t.Helper()
		resp, err := cri.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
		if err != nil {
			t.Fatalf("ListPodSandbox %v: %v", f, err)
		}
		var ids []string
		for _, item := range resp.Items {
			ids = append(ids, item.Id)
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }
	ready := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	notReady := &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}
	check := func(when string) {
		t.Helper()
		for _, tc := range []struct {
			name   string
			filter *runtimeapi.PodSandboxFilter
			want   []string
		}{
			{"no filter", nil, sorted(a, b, c)},
			{"by ID", &runtimeapi.PodSandboxFilter{Id: b}, []string{b}},
			{"by ID prefix", &runtimeapi.PodSandboxFilter{Id: a[:13]}, []string{a}},
			{"ready", &runtimeapi.PodSandboxFilter{State: ready}, sorted(a, b)},
			{"not ready", &runtimeapi.PodSandboxFilter{State: notReady}, []string{c}},
			{"label app=one", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "one"}}, sorted(a, b)},
			{"label app=one, not ready", &runtimeapi.PodSandboxFilter{State: notReady, LabelSelector: map[string]string{"app": "one"}}, nil},
			{"label no match", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "three"}}, nil},
		} {
			if got := list(tc.filter); !slices.Equal(got, tc.want) {
				t.Errorf("%s: ListPodSandbox %s = %v, want %v", when, tc.name, got, tc.want)
			}
		}
	}
	check("before the restart")

	d.restart(t)
	check("after the restart")
	d.requireState(t, c, "SANDBOX_NOTREADY")
	recs := d.liveRecords(t)
	i := slices.IndexFunc(recs, func(r journal.Record) bool { return r.ID == c })
	if i < 0 {
		t.Fatalf("no record of the stopped sandbox %s", c)
	}
	for _, marker := range []string{"stopped", "network_stopped"} {
		if _, ok := recs[i].Marker(marker); !ok {
			t.Errorf("the stopped sandbox's record lacks the %q marker: %s", marker, describeSteps(recs[i]))
		}
	}
	for _, id := range []string{a, b, c} {
		d.removePod(t, id)
	}
	d.stopClean(t)
}

// TestNetworkTimeout: a CNI ADD that outlasts network_timeout is cut off; the
// request fails with DeadlineExceeded naming the setting, the creation is
// rolled back (nothing is left, not even the plugin), and the name is free.
func TestNetworkTimeout(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{networkTimeout: time.Second})
	pod := podConfig(t, "nettimeout", "e2e", randomHex(t, 16), 0, false)
	d.slowCNI(t, 30*time.Second)
	result := d.runpBackground(t, pod)
	d.waitADD(t, 1, 5*time.Second)
	d.slowCNI(t, 0) // the ADD sleeps on; the DEL of the rollback will not
	r := <-result
	requireCode(t, "runp with a CNI ADD slower than network_timeout", r.err, r.stderr, "DeadlineExceeded")
	if !strings.Contains(r.stderr, "network_timeout") {
		t.Errorf("the error does not name network_timeout:\n%s", r.stderr)
	}
	for line := range strings.Lines(r.stderr) {
		if n := strings.Count(line, "rpc error"); n > 1 {
			t.Errorf("the error says \"rpc error\" %d times, want once:\n%s", n, line)
		}
	}
	t.Logf("runp failed after %v (network_timeout 1s, the ADD would have slept 30s)", r.elapsed.Round(time.Millisecond))
	d.waitNoLeaks(t, 5*time.Second)
	if recs := d.liveRecords(t); len(recs) != 0 {
		t.Errorf("the journal still holds %s", describeSteps(recs[0]))
	}
	adds := d.addedIDs(t)
	if len(adds) != 1 {
		t.Fatalf("CNI ADD calls %v, want one", adds)
	}
	if procs := pluginProcesses(t, adds[0]); len(procs) != 0 {
		t.Errorf("CNI plugin processes of the cut-off ADD still running: %v", procs)
	}
	id := d.mustRunp(t, pod)
	d.requireWholeSandbox(t, id)
	d.removePod(t, id)
	d.stopClean(t)
}
