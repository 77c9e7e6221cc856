package test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/migrations"
)

// TestReboot stops the daemon under two running sandboxes and takes away
// what a reboot takes away: the pinned namespaces (the namespace directory
// is on tmpfs) and the veths on the bridge. At the next start both sandboxes
// are listed NOTREADY, their addresses are freed by recovery without any
// stopp, and stopp and rmp work.
func TestReboot(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	uid := randomHex(t, 16)
	ids := []string{
		d.mustRunp(t, podConfig(t, "reboot-a", "e2e", uid, 0, false)),
		d.mustRunp(t, podConfig(t, "reboot-b", "e2e", uid, 0, false)),
	}
	for _, id := range ids {
		d.requireWholeSandbox(t, id)
	}
	if allocs := d.ipamAllocations(t); len(allocs) != 2 {
		t.Fatalf("host-local allocations %v, want one per sandbox", allocs)
	}

	d.stop(t)
	d.simulateReboot(t)

	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requirePods(t, "after the reboot: the sandboxes are still the kubelet's to remove", ids...)
	for _, id := range ids {
		st := d.requireState(t, id, "SANDBOX_NOTREADY")
		if st.Status.Network != nil && st.Status.Network.IP != "" {
			t.Errorf("after the reboot inspectp %s still reports IP %s", id, st.Status.Network.IP)
		}
	}
	if allocs := d.ipamAllocations(t); len(allocs) != 0 {
		t.Errorf("after the reboot, before any stopp, host-local still holds %v: recovery must CNI DEL sandboxes that lost their namespace", allocs)
	}
	calls := d.cniCalls(t)
	for _, id := range ids {
		if !slices.Contains(calls, cniCall{"DEL", id}) {
			t.Errorf("recovery did not call CNI DEL for %s, whose namespace was lost (calls %v)", id, calls)
		}
	}
	d.assertNoLeaks(t, ids...)

	for _, id := range ids {
		d.mustCrictl(t, "stopp", id)
		d.requireState(t, id, "SANDBOX_NOTREADY")
		d.mustCrictl(t, "rmp", id)
	}
	d.requirePods(t, "after stopp and rmp")
	d.assertNoLeaks(t)
	d.stopClean(t)
}

// TestRecoveryHangingCNI restarts the daemon, after a crash during one
// creation and a reboot under a created pod, with a CNI plugin whose calls
// hang: the undo of the crashed creation (CNI DEL) and the DEL of the pod
// that lost its namespaces cannot finish. Startup must not wait for them:
// each is cancelled after undo_timeout and left to be done later (the
// crashed creation by the journal's retries; the pod, marked NOTREADY, by
// its removal). Once the plugin works again, nothing is left.
func TestRecoveryHangingCNI(t *testing.T) {
	t.Parallel()
	const point = "sandbox-create/cni-attach/after-action"
	d := startDaemon(t, daemonOptions{extraTOML: []string{`undo_timeout = "2s"`}})
	uid := randomHex(t, 16)
	created := d.mustRunp(t, podConfig(t, "hang-created", "e2e", uid, 0, false))
	d.requireWholeSandbox(t, created)

	d.restartArmed(t, point)
	if id, _, err := d.runp(t, podConfig(t, "hang-crashed", "e2e", uid, 0, false)); err == nil {
		t.Fatalf("crictl runp returned sandbox %s: the daemon did not crash at %s", id, point)
	}
	d.requireKilledAt(t, point, 10*time.Second)
	adds := d.addedIDs(t)
	crashed := adds[len(adds)-1]
	d.simulateReboot(t)

	d.slowCNI(t, time.Hour)
	start := time.Now()
	d.restartUnarmed(t)
	t.Logf("the daemon served after %v with every CNI call hanging (undo_timeout 2s)", time.Since(start).Round(time.Millisecond))

	d.requirePods(t, "after the restart", created)
	d.requireState(t, created, "SANDBOX_NOTREADY")
	recs := d.liveRecords(t)
	i := slices.IndexFunc(recs, func(r journal.Record) bool { return r.ID == crashed })
	if i < 0 {
		t.Fatalf("the crashed creation %s is not in the journal after the restart, though its CNI DEL hung (records %v)", crashed, recs)
	}
	if r := recs[i]; r.State != journal.StateUndoing || r.HoldsName || len(r.FailedUndos()) == 0 ||
		!strings.Contains(r.FailedUndos()[0].LastError, "undo_timeout") {
		t.Errorf("the crashed creation after the restart: %s; want undoing, name released, its DEL failed by undo_timeout", describeSteps(r))
	}

	d.slowCNI(t, 0)
	d.mustCrictl(t, "stopp", created)
	d.mustCrictl(t, "rmp", created)
	d.requirePods(t, "after rmp")
	// The crashed creation's DEL is retried in the background (within the
	// harness's 2s backoff cap).
	d.waitNoLeaks(t, 10*time.Second)
	if recs := d.liveRecords(t); len(recs) != 0 {
		t.Errorf("the journal still holds %s", describeSteps(recs[0]))
	}
	d.stopClean(t)
}

// TestRecoveryPermanentlyFailingUndo covers a rollback whose undo keeps
// failing (TestNetworkFailures covers the removal): CNI ADD fails after it
// allocated an address, and every CNI DEL fails. The request fails at once
// with the ADD's error, the namespace pins are undone anyway, the name is
// free, and once the plugin works again the background retry frees the
// addresses, without a restart.
func TestRecoveryPermanentlyFailingUndo(t *testing.T) {
	t.Parallel()
	// The harness's configuration retries failed undos after 200ms, doubling
	// up to 2s (undo_retry_min, undo_retry_max).
	const retryMax = 2 * time.Second
	d := startDaemon(t, daemonOptions{})
	pod := podConfig(t, "undo-fails", "e2e", randomHex(t, 16), 0, false)
	d.failCNILate(t, true)
	d.failCNI(t, "DEL", true)

	var failed []string
	for attempt := 1; attempt <= 2; attempt++ {
		start := time.Now()
		_, stderr, err := d.runp(t, pod)
		elapsed := time.Since(start)
		if err == nil {
			t.Fatalf("runp %d succeeded although CNI ADD fails", attempt)
		}
		if !strings.Contains(stderr, lateFailure) {
			t.Errorf("runp %d: the error does not carry the CNI ADD's message %q:\n%s", attempt, lateFailure, stderr)
		}
		if strings.Contains(stderr, "AlreadyExists") || strings.Contains(stderr, "still being created") {
			t.Errorf("runp %d: the failed undo of an earlier attempt holds the name:\n%s", attempt, stderr)
		}
		if elapsed > 5*time.Second {
			t.Errorf("runp %d took %v to fail: a failing undo must not hold the request", attempt, elapsed)
		}
		adds := d.addedIDs(t)
		if len(adds) != attempt {
			t.Fatalf("CNI ADD calls %v after runp %d, want %d", adds, attempt, attempt)
		}
		id := adds[attempt-1]
		failed = append(failed, id)
		if calls := d.cniCalls(t); !slices.Contains(calls, cniCall{"DEL", id}) {
			t.Errorf("the failed ADD of %s was not undone with a DEL (calls %v)", id, calls)
		}
		// LIFO, all of them: the namespace pins were undone although the
		// DEL before them failed.
		for _, kind := range []string{"net", "ipc", "uts"} {
			if _, err := os.Lstat(d.node.Pin(kind, id)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("runp %d: namespace pin %s of the rolled-back %s is left (stat: %v)", attempt, d.node.Pin(kind, id), id, err)
			}
		}
		if owners := d.ipamAllocations(t); !slices.Contains(slices.Collect(maps.Values(owners)), id) {
			t.Fatalf("runp %d: no address allocated to %s (allocations %v): the late ADD failure did not happen as the test needs", attempt, id, owners)
		}
		d.requirePods(t, "after a failed runp")
	}

	// The journal keeps the failed undos, without the name.
	recs := d.liveRecords(t)
	for _, id := range failed {
		i := slices.IndexFunc(recs, func(r journal.Record) bool { return r.ID == id })
		if i < 0 {
			t.Fatalf("the live journal has no record of %s whose DEL fails (records %v)", id, recs)
		}
		t.Logf("live journal: %s", describeSteps(recs[i]))
		if r := recs[i]; r.State != journal.StateUndoing || r.HoldsName || len(r.FailedUndos()) == 0 {
			t.Errorf("live journal record of %s: %s, want undoing, not holding the name, with a failed undo", id, describeSteps(r))
		}
	}

	// Fix the plugin: within the retry backoff, the addresses are freed.
	d.failCNILate(t, false)
	d.failCNI(t, "DEL", false)
	d.waitNoLeaks(t, retryMax+3*time.Second)
	if recs := d.liveRecords(t); len(recs) != 0 {
		t.Errorf("after the undo retries succeeded the live journal still holds %d records", len(recs))
	}

	id := d.mustRunp(t, pod)
	d.requireWholeSandbox(t, id)
	d.removePod(t, id)
	d.stopClean(t)
}

// TestDamagedJournal starts the daemon on a journal file damaged in several
// ways: it must refuse to start, at once, with a message that names the file
// and says what is wrong and what to do, without a panic, and without
// touching the file. The undamaged file then still works.
func TestDamagedJournal(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	ids := []string{
		d.mustRunp(t, podConfig(t, "damaged-a", "e2e", randomHex(t, 16), 0, false)),
		d.mustRunp(t, podConfig(t, "damaged-b", "e2e", randomHex(t, 16), 0, true)),
	}
	d.stop(t)
	if recs := d.records(t); len(recs) != len(ids) {
		t.Fatalf("journal holds %d records, want %d", len(recs), len(ids))
	}
	d.checkJournal(t)
	path := d.journalPath()
	pristine, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("journal %s: %d bytes", path, len(pristine))
	if len(pristine) <= 8192+4096 {
		t.Fatalf("the journal is only %d bytes: no data pages to damage", len(pristine))
	}

	for _, tc := range []struct {
		name   string
		damage func(t *testing.T)
		words  []string // one of them must be in the message
	}{
		{"truncated", func(t *testing.T) {
			// Both meta pages stay; every data page is cut off.
			if err := os.Truncate(path, 8192+100); err != nil {
				t.Fatal(err)
			}
		}, []string{"corrupt"}},
		{"random bytes over the data pages", func(t *testing.T) {
			junk := make([]byte, len(pristine)-8192)
			if _, err := rand.Read(junk); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(junk, 8192); err != nil {
				t.Fatal(err)
			}
		}, []string{"corrupt"}},
		{"newer schema", func(t *testing.T) {
			db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], 999)
			if err := db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(migrations.BucketMeta).Put(migrations.KeyVersion, v[:])
			}); err != nil {
				t.Fatal(err)
			}
		}, []string{"newer"}},
		{"not a database", func(t *testing.T) {
			writeFile(t, path, "this is not a bbolt database, just some text\n", 0o600)
		}, []string{"corrupt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, path, string(pristine), 0o600)
			tc.damage(t)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out, elapsed, exitErr := d.runOnce(t, 15*time.Second)
			t.Logf("daemon exited after %v (%v); output:\n%s", elapsed.Round(time.Millisecond), exitErr, out)
			if exitErr == nil {
				t.Errorf("the daemon exited with status 0 on a damaged journal")
			}
			var ee *exec.ExitError
			if errors.As(exitErr, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() {
				t.Errorf("the daemon died of a signal (%v), want a non-zero exit status", exitErr)
			}
			if elapsed > 5*time.Second {
				t.Errorf("the daemon took %v to refuse the damaged journal, want a few seconds at most", elapsed)
			}
			if !strings.Contains(out, path) {
				t.Errorf("the daemon's output does not name the journal file %s", path)
			}
			if !slices.ContainsFunc(tc.words, func(w string) bool { return strings.Contains(strings.ToLower(out), w) }) {
				t.Errorf("the daemon's output does not say what is wrong (any of %q)", tc.words)
			}
			if !regexp.MustCompile(`(?i)move it aside|restore|upgrade`).MatchString(out) {
				t.Errorf("the daemon's output does not say what to do (move the file aside, restore, upgrade)")
			}
			if panicRE.MatchString(out) {
				t.Errorf("the daemon's output holds a panic or a goroutine dump")
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("the journal file after the attempt: %v", err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("the daemon changed the damaged journal file (%d bytes before, %d after)", len(before), len(after))
			}
		})
	}

	// The undamaged journal still works.
	writeFile(t, path, string(pristine), 0o600)
	d.checkJournal(t)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requirePods(t, "on the undamaged journal", ids...)
	for _, id := range ids {
		d.requireState(t, id, "SANDBOX_READY")
		d.removePod(t, id)
	}
	d.stopClean(t)
}

// panicRE finds a Go panic or goroutine dump in a process's output.
var panicRE = regexp.MustCompile(`(?m)^(panic: |fatal error: |goroutine \d+ \[)`)

// runOnce runs the daemon on the node in the foreground, as an operator
// would, and returns its combined output, its exit error and how long it
// ran. A daemon still running after limit is killed (by PID).
func (d *daemon) runOnce(t *testing.T, limit time.Duration) (string, time.Duration, error) {
	t.Helper()
	if alive, _ := d.running(); alive {
		t.Fatal("runOnce: the daemon is running")
	}
	cmd := exec.Command(daemonBinary(t), "serve", "--config", d.configPath)
	cmd.Env = daemonEnv(nil)
	cmd.Dir = d.base
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	trackDaemon(cmd.Process)
	defer untrackDaemon(cmd.Process)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), time.Since(start), err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		err := <-done
		t.Errorf("the daemon (pid %d) was still running %v after it started; killed", cmd.Process.Pid, limit)
		return out.String(), time.Since(start), err
	}
}
