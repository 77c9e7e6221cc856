package test

// CNI faults (issue 10): plugins that crash or hang, a network configuration replaced
// between ADD and DEL, and overlapping teardowns of one sandbox. The faults are real: the
// bridge plugin wrapper (see writeWrapper) is killed, exits, or sleeps on demand.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// waitCNICall waits until the bridge plugin wrapper has been called with the command for
// the sandbox (it logs a call before sleeping).
func (d *daemon) waitCNICall(t *testing.T, command, id string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		if calls := d.cniCalls(t); !slices.Contains(calls, cniCall{command, id}) {
			return fmt.Errorf("CNI %s of %s was not called within %v (calls: %v)", command, id, within, calls)
		}
		return nil
	})
}

// TestCNIPluginCrashes: a plugin killed before or after doing its work, or exiting
// without a CNI error. A crashed ADD fails the creation, which is rolled back (DEL) and
// leaves nothing, and the name is free again; a crashed DEL fails StopPodSandbox until DEL
// works again, and fails no RemovePodSandbox (the undo is retried in the background).
func TestCNIPluginCrashes(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"crash", "crash-late", "exit"} {
		t.Run("ADD "+fault, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			pod := podConfig(t, "crashing-add", "e2e", randomHex(t, 16), 0, false)
			d.cniFault(t, fault, "ADD", true)
			if _, stderr, err := d.runp(t, pod); err == nil {
				t.Fatalf("runp succeeded although the CNI plugin's ADD %s", fault)
			} else if fault == "exit" && !strings.Contains(stderr, "injected exit") {
				t.Errorf("runp's error does not carry the plugin's stderr:\n%s", stderr)
			}
			d.requirePods(t, "after the failed runp")
			adds := d.addedIDs(t)
			if len(adds) != 1 {
				t.Fatalf("CNI ADD calls %v, want one", adds)
			}
			if calls := d.cniCalls(t); !slices.Contains(calls, cniCall{"DEL", adds[0]}) {
				t.Errorf("the crashed ADD of %s was not undone with a DEL (calls %v)", adds[0], calls)
			}
			d.assertNoLeaks(t)

			d.cniFault(t, fault, "ADD", false)
			id := d.mustRunp(t, pod)
			d.requireWholeSandbox(t, id)
			d.removePod(t, id)
			d.stopClean(t)
		})
		t.Run("DEL "+fault, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			stopped := d.mustRunp(t, podConfig(t, "crashing-del", "e2e", randomHex(t, 16), 0, false))
			removed := d.mustRunp(t, podConfig(t, "crashing-rm", "e2e", randomHex(t, 16), 0, false))
			d.cniFault(t, fault, "DEL", true)
			if _, _, err := d.crictl(t, "stopp", stopped); err == nil {
				t.Errorf("stopp succeeded although the CNI plugin's DEL %s: the network may be left behind", fault)
			}
			d.requireRemoveRPC(t, removed, "the CNI plugin's DEL "+fault+": removed for the client, the undo retried later")
			d.requirePods(t, "after the removal", stopped)

			d.cniFault(t, fault, "DEL", false)
			d.mustCrictl(t, "stopp", stopped)
			d.requireState(t, stopped, "SANDBOX_NOTREADY")
			d.waitNoLeaks(t, expiryWait, stopped)
			d.mustCrictl(t, "rmp", stopped)
			d.requirePods(t, "after rmp")
			d.stopClean(t)
		})
	}
}

// TestCNIDelHangsPastNetworkTimeout: a DEL that hangs is cut off at network_timeout, its
// plugin processes killed; StopPodSandbox fails and works once DEL does. (A hanging ADD is
// TestNetworkTimeout.)
func TestCNIDelHangsPastNetworkTimeout(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{networkTimeout: 2 * time.Second})
	id := d.mustRunp(t, podConfig(t, "hanging-del", "e2e", randomHex(t, 16), 0, false))
	d.slowCNI(t, 60*time.Second)
	start := time.Now()
	_, stderr, err := d.crictl(t, "stopp", id)
	d.slowCNI(t, 0)
	if err == nil {
		t.Fatal("stopp succeeded although CNI DEL hung past network_timeout")
	}
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Errorf("stopp failed after %v: not cut off at network_timeout (2s):\n%s", elapsed, stderr)
	}
	if procs := pluginProcesses(t, id); len(procs) != 0 {
		t.Errorf("CNI plugin processes of the cut-off DEL still running: %v", procs)
	}
	d.mustCrictl(t, "stopp", id)
	d.requireState(t, id, "SANDBOX_NOTREADY")
	d.assertNoLeaks(t, id)
	d.mustCrictl(t, "rmp", id)
	d.stopClean(t)
}

// podNetwork is the CNI network of a test node: its name, bridge and subnet.
type podNetwork struct{ name, bridge, subnet, gateway string }

func (d *daemon) podNetwork() podNetwork {
	return podNetwork{d.network, d.bridge, d.subnet, d.gateway}
}

func (d *daemon) setPodNetwork(n podNetwork) {
	d.network, d.bridge, d.subnet, d.gateway = n.name, n.bridge, n.subnet, n.gateway
}

// networkReady returns the NetworkReady condition of the daemon's Status.
func (d *daemon) networkReady(t *testing.T) *runtimeapi.RuntimeCondition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := d.cri(t).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.GetType() == runtimeapi.NetworkReady {
			return c
		}
	}
	t.Fatalf("Status has no NetworkReady condition: %v", resp)
	return nil
}

// waitNetworkReady waits until Status reports NetworkReady as want.
func (d *daemon) waitNetworkReady(t *testing.T, want bool, why string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		c := d.networkReady(t)
		if c.GetStatus() == want {
			t.Logf("NetworkReady %v (%s): %s", want, why, c.GetMessage())
			return nil
		}
		return fmt.Errorf("NetworkReady is still %v (%s) 10s after %s: the CNI configuration directory is not followed", c.GetStatus(), c.GetMessage(), why)
	})
}

// TestCNINetworkReplaced: the CNI configuration is replaced by another network (another
// name, bridge and subnet) while sandboxes are attached to the first: DEL of those reaches
// the first network although its name changed, and the daemon loads the new network
// rather than keep the one it loaded first.
//
// "followed while running": NetworkReady follows the directory (false while it is empty,
// and no pod can be made), and new sandboxes join the new network without a restart.
// "torn down after a restart": after a restart, which loads the new network, the old
// sandboxes are stopped and removed on the network they were attached to: through libcni's
// cached ADD configuration, or, when that cache is gone (as when /var/lib/cni is wiped),
// through the configuration recorded in the journal.
//
// In both, nothing is left of the old sandboxes: no IP allocation, no veth on the old
// bridge, no cache entry, no namespace.
func TestCNINetworkReplaced(t *testing.T) {
	t.Parallel()
	for _, restart := range []bool{false, true} {
		name := "followed while running"
		if restart {
			name = "torn down after a restart"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			cached := d.mustRunp(t, podConfig(t, "before-cached", "e2e", randomHex(t, 16), 0, false))
			recorded := d.mustRunp(t, podConfig(t, "before-recorded", "e2e", randomHex(t, 16), 0, false))
			oldNet := d.podNetwork()
			t.Cleanup(func() {
				if _, err := net.InterfaceByName(oldNet.bridge); err == nil {
					if out, err := exec.Command("ip", "link", "del", oldNet.bridge).CombinedOutput(); err != nil {
						t.Logf("cleanup: ip link del %s: %v: %s", oldNet.bridge, err, out)
					}
				}
			})

			// The directory emptied: not ready, and no pod can be made.
			if err := os.Remove(filepath.Join(d.confDir, "10-cjtest.conflist")); err != nil {
				t.Fatal(err)
			}
			if !restart {
				d.waitNetworkReady(t, false, "the network configuration was removed")
				_, stderr, err := d.runp(t, podConfig(t, "no-network", "e2e", randomHex(t, 16), 0, false))
				requireCode(t, "runp without a network configuration", err, stderr, "FailedPrecondition")
			}

			// Another network appears.
			bridge, subnet, ip := newNetwork(t)
			d.setPodNetwork(podNetwork{"cjtest2", bridge, subnet, fmt.Sprintf("%d.%d.%d.1", ip[0], ip[1], ip[2])})
			d.writeCNIConfig(t)
			if err := os.Rename(filepath.Join(d.confDir, "10-cjtest.conflist"), filepath.Join(d.confDir, "20-cjtest2.conflist")); err != nil {
				t.Fatal(err)
			}
			newNet := d.podNetwork()
			if restart {
				// One old sandbox loses its libcni cache entry: its DEL must come from the
				// journal's record.
				if err := os.Remove(d.node.CNIResult(oldNet.name, recorded, "eth0")); err != nil {
					t.Fatalf("libcni's cached result of %s: %v", recorded, err)
				}
				d.restart(t)
			} else {
				d.waitNetworkReady(t, true, "another network was configured")
			}
			after := d.mustRunp(t, podConfig(t, "after", "e2e", randomHex(t, 16), 0, false))
			_, sub, _ := net.ParseCIDR(newNet.subnet)
			if got := d.inspectp(t, after).Status.Network; got == nil || !sub.Contains(net.ParseIP(got.IP)) {
				t.Fatalf("a pod made after the network was replaced has network %+v, want an IP in the new network's %s", got, newNet.subnet)
			}

			for _, id := range []string{cached, recorded} {
				d.mustCrictl(t, "stopp", id)
				d.requireState(t, id, "SANDBOX_NOTREADY")
				d.mustCrictl(t, "rmp", id)
			}
			d.requirePods(t, "after the old pods were removed", after)

			// Nothing is left of the old sandboxes on the old network; the new one keeps its own.
			d.setPodNetwork(oldNet)
			if owners := d.ipamAllocations(t); len(owners) != 0 {
				t.Errorf("IP allocations left on the old network %s: %v", oldNet.name, owners)
			}
			if ports := d.bridgePorts(t); len(ports) != 0 {
				t.Errorf("interfaces left on the old bridge %s: %v", oldNet.bridge, ports)
			}
			d.assertNoLeaks(t, after)
			d.setPodNetwork(newNet)
			d.assertNoLeaks(t, after)
			d.removePod(t, after)
			d.stopClean(t)
		})
	}
}

// TestConcurrentTeardown: a second StopPodSandbox, or a RemovePodSandbox, of a sandbox
// whose StopPodSandbox is running CNI DEL waits for it instead of killing its plugin, and
// both succeed: a teardown never kills the plugin of another one.
func TestConcurrentTeardown(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"StopPodSandbox", "RemovePodSandbox"} {
		t.Run(second, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			id := d.mustRunp(t, podConfig(t, "torn-down", "e2e", randomHex(t, 16), 0, false))
			cri := d.cri(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			d.slowCNI(t, 2*time.Second)
			first := make(chan error, 1)
			go func() {
				_, err := cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
				first <- err
			}()
			d.waitCNICall(t, "DEL", id, 20*time.Second)
			var err error
			if second == "StopPodSandbox" {
				_, err = cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			} else {
				_, err = cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			}
			if err != nil {
				t.Errorf("%s during a StopPodSandbox of the same sandbox: %v", second, err)
			}
			if err := <-first; err != nil {
				t.Errorf("StopPodSandbox overlapped by a %s: %v", second, err)
			}
			d.slowCNI(t, 0)

			if second == "StopPodSandbox" {
				d.requireState(t, id, "SANDBOX_NOTREADY")
				d.assertNoLeaks(t, id)
				d.mustCrictl(t, "rmp", id)
			}
			d.requirePods(t, "after the teardown")
			d.stopClean(t)
			var dels int
			for _, c := range d.cniCalls(t) {
				if c == (cniCall{"DEL", id}) {
					dels++
				}
			}
			if dels != 1 {
				t.Errorf("CNI DEL of %s was called %d times, want once: the teardowns were not kept apart", id, dels)
			}
		})
	}
}
