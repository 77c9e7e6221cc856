package test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/journal"
)

// journalInspect runs `crijournal inspect` against the daemon's configuration.
func (d *daemon) journalInspect(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(daemonBinary(t), append([]string{"inspect", "--config", d.configPath}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (d *daemon) inspectJSON(t *testing.T, args ...string) []journal.Record {
	t.Helper()
	out, err := d.journalInspect(t, append([]string{"--json"}, args...)...)
	if err != nil {
		t.Fatalf("crijournal inspect --json: %v\n%s", err, out)
	}
	var recs []journal.Record
	if err := json.Unmarshal([]byte(out), &recs); err != nil {
		t.Fatalf("crijournal inspect --json printed %q: %v", out, err)
	}
	return recs
}

// TestInspectAndMetrics follows a creation that times out with `crijournal inspect` (live,
// then post-mortem) and the metrics endpoint.
func TestInspectAndMetrics(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{cacheTTL: 30 * time.Second, extraTOML: []string{`metrics_address = "127.0.0.1:0"`}})
	pod := podConfig(t, "inspected", "e2e", randomHex(t, 16), 0, false)

	// While the CNI ADD is slow: live inspect shows the creation and its stage.
	nADD := len(d.addedIDs(t))
	d.slowCNI(t, slowADD)
	first := d.runpBackground(t, "-T", "1s", pod)
	created := d.waitADD(t, nADD+1, 5*time.Second)
	out, err := d.journalInspect(t)
	if err != nil || !strings.Contains(out, created[:13]) || !strings.Contains(out, "creating") || !strings.Contains(out, "sandbox network creation") {
		t.Fatalf("live inspect during the slow creation (err %v):\n%s", err, out)
	}
	one, err := d.journalInspect(t, created[:20])
	if err != nil || !strings.Contains(one, "netns-pin") || !strings.Contains(one, "cni-attach") || !strings.Contains(one, "intent") {
		t.Fatalf("inspect of one record during the creation (err %v):\n%s", err, one)
	}
	// A duplicate made now finds the name in progress: counted by stage.
	dup := d.runpBackground(t, "-T", "1s", pod)
	if r := <-first; r.err == nil {
		t.Fatalf("the first runp succeeded: %s", r.stdout)
	}
	<-dup
	d.slowCNI(t, 0)
	d.waitNetworkDone(t, created, 2*slowADD)

	// After the timeout: the cached record with its expiry.
	recs := d.inspectJSON(t, "--state", "cached")
	if len(recs) != 1 || recs[0].ID != created || recs[0].Expiry.IsZero() {
		t.Fatalf("live inspect --state cached = %+v, want the cached sandbox %s with an expiry", recs, created)
	}
	table, _ := d.journalInspect(t, "--state", "cached")
	if !strings.Contains(table, "cached") || !strings.Contains(table, "in ") {
		t.Errorf("inspect table does not show the expiry:\n%s", table)
	}
	if out, err := d.journalInspect(t, "--check"); err != nil || !strings.Contains(out, "journal OK") {
		t.Errorf("live inspect --check = %v:\n%s", err, out)
	}

	// Metrics moved as the scenario went.
	for sample, want := range map[string]float64{
		`crijournal_resource_cache_events_total{event="cached",kind="sandbox"}`:                        1,
		`crijournal_resources_stalled_at_stage_total{kind="sandbox",stage="sandbox network creation"}`: 1,
		`crijournal_journal_records{kind="sandbox",state="cached"}`:                                    1,
	} {
		if got := d.metric(t, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}
	if got := d.metric(t, `crijournal_cri_operations_total{code="DeadlineExceeded",method="/runtime.v1.RuntimeService/RunPodSandbox"}`); got < 2 {
		t.Errorf("RunPodSandbox DeadlineExceeded count = %v, want at least 2", got)
	}
	if got := d.metric(t, "crijournal_journal_commit_duration_seconds_count"); got < 2 {
		t.Errorf("journal commits counted = %v, want at least 2", got)
	}

	// Daemon down: the same records, from the file.
	d.stop(t)
	offline := d.inspectJSON(t)
	if len(offline) != 1 || offline[0].ID != created || offline[0].State != journal.StateCached {
		t.Fatalf("post-mortem inspect = %+v, want the cached sandbox %s", offline, created)
	}

	// The retry claims it after a restart; the metrics say so.
	d.restart(t)
	if id := d.mustRunp(t, pod); id != created {
		t.Fatalf("retry after restart got %s, want %s", id, created)
	}
	if got := d.metric(t, `crijournal_resource_cache_events_total{event="claimed",kind="sandbox"}`); got != 1 {
		t.Errorf("claimed events = %v, want 1", got)
	}
	if got := d.metric(t, `crijournal_recovery_records_total{outcome="kept"}`); got != 1 {
		t.Errorf("recovery kept = %v, want 1 (the cached sandbox)", got)
	}
	d.removePod(t, created)
	for _, step := range []string{"cni-attach", "netns-pin"} {
		sample := `crijournal_undos_total{attempt="first",result="ok",step="` + step + `"}`
		if got := d.metric(t, sample); got < 1 {
			t.Errorf("%s = %v after the removal, want at least 1", sample, got)
		}
	}
	d.stopClean(t)
}

// TestInspectCheckFindsDamage: `inspect --check` on a damaged journal exits non-zero and
// names the problem, whether the damage is to bbolt's pages or to the journal's invariants.
func TestInspectCheckFindsDamage(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	d.mustRunp(t, podConfig(t, "checked", "e2e", randomHex(t, 16), 0, true))
	d.stop(t)
	path := d.root + "/journal.db"
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := d.journalInspect(t, "--check"); err != nil || !strings.Contains(out, "journal OK") {
		t.Fatalf("inspect --check of a sound journal = %v:\n%s", err, out)
	}
	tests := []struct {
		name   string
		damage func(t *testing.T)
		want   []string // every problem must be listed
	}{
		{"dangling name and a malformed record", func(t *testing.T) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.Update(func(tx *bolt.Tx) error {
				if err := tx.Bucket([]byte("names")).Put([]byte("sandbox/k8s_ghost_e2e_x_0"), []byte(strings.Repeat("a", 64))); err != nil {
					return err
				}
				return tx.Bucket([]byte("records")).Put([]byte(strings.Repeat("b", 64)), []byte("{not json"))
			})
		}, []string{"missing record", `record "` + strings.Repeat("b", 64) + `"`}},
		{"random bytes in the data pages", func(t *testing.T) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			junk := make([]byte, len(good)-8192)
			for i := range junk {
				junk[i] = byte(i*131 + 7)
			}
			f.WriteAt(junk, 8192)
		}, []string{"corrupt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := os.WriteFile(path, good, 0o600); err != nil {
				t.Fatal(err)
			}
			tt.damage(t)
			out, err := d.journalInspect(t, "--check")
			if err == nil {
				t.Fatalf("inspect --check of a damaged journal succeeded:\n%s", out)
			}
			for _, want := range tt.want {
				if !strings.Contains(out, want) {
					t.Errorf("inspect --check of a damaged journal does not list %q:\n%s", want, out)
				}
			}
		})
	}
	// Leave a sound journal for the cleanup.
	os.WriteFile(path, good, 0o600)

	// A file locked by a process that does not answer on the socket (a hung
	// daemon): a plain message, after the lock timeout, not a hang.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, args := range [][]string{{}, {"--check"}} {
		start := time.Now()
		out, err := d.journalInspect(t, append(args, "--journal-lock-timeout", "300ms")...)
		if err == nil || !strings.Contains(out, "locked by a running daemon, but nothing answers") {
			t.Errorf("inspect %v of a journal locked by a silent process = %v, want a failure saying so:\n%s", args, err, out)
		}
		t.Logf("inspect %v gave up after %v: %s", args, time.Since(start).Round(time.Millisecond), strings.TrimSpace(out))
	}
}

// TestLogs runs a pod's life, with a duplicate request that waits on the
// creation, under JSON logs at debug level: every line is JSON; every line
// about the pod carries its ID and name; the stages are at debug and the
// outcomes at info; the waiting request says once what it waits for.
func TestLogs(t *testing.T) {
	t.Parallel()
	// JSON through the environment, which overrides the file's text (debug level).
	d := startDaemon(t, daemonOptions{env: []string{"CRIJOURNAL_LOG_FORMAT=json"}})
	uid := randomHex(t, 16)
	pod := podConfig(t, "logs", "e2e", uid, 0, false)
	name := "k8s_logs_e2e_" + uid + "_0" // the sandbox's name, as the kubelet's would be
	d.slowCNI(t, 2*time.Second)
	first := d.runpBackground(t, pod)
	d.waitADD(t, 1, 5*time.Second)
	d.slowCNI(t, 0)
	dupID := d.mustRunp(t, pod) // waits for the creation, then gets it
	r := <-first
	if r.err != nil {
		t.Fatalf("the first runp: %v: %s", r.err, r.stderr)
	}
	id := lastLine(r.stdout)
	if dupID != id {
		t.Fatalf("the duplicate got %s, the first %s", dupID, id)
	}
	d.removePod(t, id)
	d.stopClean(t)

	type line struct {
		Level, Msg, ID, Name, Stage string
	}
	var about []line
	waits := 0
	for raw := range strings.Lines(d.logOfStart(1)) {
		raw = strings.TrimSpace(raw)
		if raw == "" || strings.HasPrefix(raw, "=== e2e:") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Errorf("a log line is not JSON: %s", raw)
			continue
		}
		str := func(k string) string { s, _ := m[k].(string); return s }
		l := line{Level: str("level"), Msg: str("msg"), ID: str("id"), Name: str("name"), Stage: str("stage")}
		if l.Msg == "name in progress: waiting" && l.Name == name {
			waits++
			if m["for"] == nil || l.Stage == "" {
				t.Errorf("the waiting line does not say what it waits for and how long: %s", raw)
			}
		}
		if l.ID != id {
			continue
		}
		about = append(about, l)
		if l.Name != name {
			t.Errorf("a line about sandbox %s lacks its name %q: %s", id, name, raw)
		}
	}
	if waits != 1 {
		t.Errorf("the duplicate request logged %d waiting lines, want exactly one", waits)
	}
	levels := map[string]string{}
	for _, l := range about {
		if l.Msg == "stage" {
			levels["stage "+l.Stage] = l.Level
		} else {
			levels[l.Msg] = l.Level
		}
	}
	for msg, want := range map[string]string{
		"pod sandbox created": "INFO", "pod sandbox stopped": "INFO", "pod sandbox removed": "INFO",
		"stage sandbox network creation": "DEBUG",
	} {
		if got := levels[msg]; got != want {
			t.Errorf("%q logged at %q, want %s (lines about the pod: %v)", msg, got, want, levels)
		}
	}
}

// TestInspectWatch follows the journal with `crijournal inspect --watch
// --json` (one JSON list per change): a pod's creation and removal show up
// as they happen, pushed by the daemon; when the daemon stops, the watch goes
// on from the file.
func TestInspectWatch(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	cmd := exec.Command(daemonBinary(t), "inspect", "--watch", "--json", "--config", d.configPath)
	cmd.Env = daemonEnv(nil)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	snapshots := make(chan []journal.Record, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var recs []journal.Record
			if err := json.Unmarshal(sc.Bytes(), &recs); err != nil {
				t.Errorf("inspect --watch --json printed a line that is not a JSON list: %s", sc.Text())
				continue
			}
			snapshots <- recs
		}
		close(snapshots)
	}()
	// waitFor reads snapshots until one satisfies ok.
	waitFor := func(what string, ok func([]journal.Record) bool) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case recs, open := <-snapshots:
				if !open {
					t.Fatalf("inspect --watch ended while waiting for %s", what)
				}
				if ok(recs) {
					return
				}
			case <-timeout:
				t.Fatalf("inspect --watch showed no %s within 10s", what)
			}
		}
	}
	waitFor("first snapshot", func([]journal.Record) bool { return true })

	id := d.mustRunp(t, podConfig(t, "watched", "e2e", randomHex(t, 16), 0, false))
	waitFor("created sandbox", func(recs []journal.Record) bool {
		return len(recs) == 1 && recs[0].ID == id && recs[0].State == journal.StateCreated
	})
	d.removePod(t, id)
	waitFor("empty journal after rmp", func(recs []journal.Record) bool { return len(recs) == 0 })

	// The daemon stops: the watch goes on from the file (a snapshot a second).
	d.mustRunp(t, podConfig(t, "watched-2", "e2e", randomHex(t, 16), 0, true))
	waitFor("second sandbox", func(recs []journal.Record) bool { return len(recs) == 1 })
	d.stop(t)
	waitFor("snapshot from the file", func(recs []journal.Record) bool { return len(recs) == 1 })
	waitFor("another snapshot from the file", func(recs []journal.Record) bool { return len(recs) == 1 })
	d.restart(t)
	for _, pod := range d.pods(t) {
		d.removePod(t, pod)
	}
	waitFor("empty journal after the restart and rmp", func(recs []journal.Record) bool { return len(recs) == 0 })
	d.stopClean(t)
}
