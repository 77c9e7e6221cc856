package oci

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// The tests of Prepare and Pending.Create, and of the undos of the steps they are.

func TestCreateTwiceIsAlreadyExists(t *testing.T) {
	r := newRuntime(t)
	c := createContainer(t, r, []string{"sleep", "30"}, nil)
	_, err := create(ctxb, r, c.id, c.spec, c.logPath, StdinNone)
	if !errors.Is(err, ErrAlreadyExists) {
		t.Fatalf("second Create: %v, want ErrAlreadyExists", err)
	}
	if st, err := r.State(ctxb, c.id); err != nil || st.Status != StatusCreated {
		t.Fatalf("the first container was harmed: %+v, %v", st, err)
	}
}

func TestCreateFailureReportsRuntimeErrorAndCleansUp(t *testing.T) {
	r := newRuntime(t)
	c, err := tryCreate(t, r, []string{"/no/such/binary"}, nil)
	if err == nil {
		t.Fatal("Create of a container with a missing binary succeeded")
	}
	if !strings.Contains(err.Error(), "no/such/binary") {
		t.Fatalf("Create error %q does not carry the runtime's message", err)
	}
	if ids, err := r.Containers(ctxb); err != nil || len(ids) != 0 {
		t.Fatalf("runc list after a failed Create = %v, %v", ids, err)
	}
	for _, p := range []string{r.containerDir(c.id), filepath.Join(r.attachDir(), c.id), filepath.Join(c.bundle, "config.json"), c.cgroupDir("memory"), c.conmonCgroupDir("memory")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind by a failed Create (%v)", p, err)
		}
	}
	requireNoZombies(t)
}

func TestCreateBadLogPathReportsConmonError(t *testing.T) {
	r := newRuntime(t)
	c := deletedContainer(t, r)
	_, err := create(ctxb, r, c.id, c.spec, "/proc/ctr.log", StdinNone) // Create makes a missing log directory: this one exists, and refuses the file
	if err == nil || !strings.Contains(err.Error(), "open log file") {
		t.Fatalf("Create with an unwritable log path: %v, want conmon's message", err)
	}
	if _, err := os.Stat(r.containerDir(c.id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state dir left behind: %v", err)
	}
	requireNoZombies(t)
}

// TestHeldConmonNeverRunsRuntime: Prepare starts conmon held on its start pipe; when
// Create fails before the start (config.json cannot be written), or is never called
// (the caller closes the Pending after another step failed), conmon is killed before
// the pipe closes, so the runtime never runs `create` (conmon takes the end of the pipe
// as a start too) and no process is left.
func TestHeldConmonNeverRunsRuntime(t *testing.T) {
	requireRunc(t)
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, r *Runtime, p *Pending, spec *specs.Spec)
	}{
		{"create fails before the start", func(t *testing.T, r *Runtime, p *Pending, spec *specs.Spec) {
			// A directory that is not empty holds config.json's name.
			if err := os.MkdirAll(filepath.Join(p.Bundle(), "config.json", "in-the-way"), 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Create(ctxb, spec); err == nil || !strings.Contains(err.Error(), "config.json") {
				t.Fatalf("Create with config.json in the way: %v, want its write's error", err)
			}
			// What is in the way also stopped Create's cleanup from removing the state
			// directory; the test's cleanup deletes the rest once it is gone.
			if err := os.RemoveAll(filepath.Join(p.Bundle(), "config.json")); err != nil {
				t.Fatal(err)
			}
		}},
		{"closed without create", func(t *testing.T, r *Runtime, p *Pending, spec *specs.Spec) {}},
		{"create with another terminal", func(t *testing.T, r *Runtime, p *Pending, spec *specs.Spec) {
			spec.Process.Terminal = true
			if _, err := p.Create(ctxb, spec); !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Create with a terminal conmon was not prepared for: %v, want ErrInvalidSpec", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortTempDir(t)
			marker := filepath.Join(dir, "created")
			wrapper := wrapTool(t, dir, "runc", "case \" $* \" in *\" create \"*) touch "+marker+";; esac")
			r, err := New(Config{Handler: "runc", Path: wrapper, Root: filepath.Join(dir, "runc"), StateDir: filepath.Join(dir, "s")})
			if err != nil {
				t.Fatal(err)
			}
			c := deletedContainer(t, r)
			if err := os.Remove(marker); err != nil {
				t.Fatalf("the wrapper did not record the first create: %v", err)
			}
			p, err := r.Prepare(ctxb, c.id, c.logPath, false, StdinNone)
			if err != nil {
				t.Fatal(err)
			}
			tc.end(t, r, p, c.spec)
			if err := p.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if testenv.Alive(p.pid) {
				t.Fatalf("conmon %d alive after Close", p.pid)
			}
			time.Sleep(200 * time.Millisecond) // a conmon left running would have run the runtime by now
			if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the runtime ran create (%v)", err)
			}
			requireNoDescendant(t, "the Pending", c.id)
			requireNoZombies(t)
		})
	}
}

// TestCreateTimeoutKillsSlowConmon is CRI-O's slow-conmon scenario: a wrapper
// sleeps before it runs conmon, and Create's context ends first.
func TestCreateTimeoutKillsSlowConmon(t *testing.T) {
	requireRunc(t)
	dir := shortTempDir(t)
	wrapper := wrapTool(t, dir, "conmon", "sleep 5")
	r, err := New(Config{Handler: "runc", Root: filepath.Join(dir, "runc"), StateDir: filepath.Join(dir, "s"), ConmonPath: wrapper})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxb, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := tryCreateCtx(ctx, t, r, []string{"sleep", "30"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Create with a slow conmon: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Create returned %s after its deadline", took)
	}
	if _, err := os.Stat(r.containerDir(c.id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state dir left behind: %v", err)
	}
	requireNoDescendant(t, "the failed Create", c.id, "sleep\x005")
	requireNoZombies(t)
}

// TestJournalUndoDeletesContainer runs the undo of each of the package's steps after a
// crash between its intent and its action, or after the action: the conmon step's with
// conmon held (it kills it at once, without the grace a conmon that ran a container
// gets), the runtime step's with the container started.
func TestJournalUndoDeletesContainer(t *testing.T) {
	for _, tc := range []struct {
		kind journal.StepKind
		make func(t *testing.T, r *Runtime, id string) (conmon int)
	}{
		{StepConmon, func(t *testing.T, r *Runtime, id string) int {
			p, err := r.Prepare(ctxb, id, "", false, StdinNone)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			return p.pid
		}},
		{StepRuntimeContainer, func(t *testing.T, r *Runtime, id string) int {
			c := startContainer(t, r, []string{"sleep", "30"}, func(in *SpecInput) { in.ID = id })
			return conmonPID(t, r, c.id)
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			r := newRuntime(t)
			reg := journal.NewRegistry()
			RegisterUndos(reg, func(handler string) (*Runtime, error) {
				if handler != "runc" {
					return nil, fmt.Errorf("no handler %q", handler)
				}
				return r, nil
			})
			j, err := journal.Open(filepath.Join(t.TempDir(), "j.db"), journal.Options{Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			rec, err := j.Begin(journal.BeginRequest{Kind: journal.KindContainer, Name: "c", Fingerprint: "f"})
			if err != nil {
				t.Fatal(err)
			}
			args := map[string]string{ArgHandler: "runc", ArgID: rec.ID}
			if _, err := j.Intents(rec.ID, journal.Intended{Stage: "stage", Kind: tc.kind, Args: args}); err != nil {
				t.Fatal(err)
			}
			conmon := tc.make(t, r, rec.ID)
			started := time.Now()
			if err := j.Rollback(ctxb, rec.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := r.State(ctxb, rec.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("State after the undo: %v, want ErrNotFound", err)
			}
			if testenv.Alive(conmon) {
				t.Fatalf("conmon %d alive after the undo", conmon)
			}
			if _, err := os.Stat(r.containerDir(rec.ID)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("state directory after the undo: %v", err)
			}
			if took := time.Since(started); tc.kind == StepConmon && took >= conmonGrace {
				t.Fatalf("the undo of a held conmon took %v: it waited for conmon's grace", took)
			}
		})
	}
}

// TestConmonUndoAfterDeleteRunsNothing: the undo of the conmon step runs after the
// runtime step's undo, Delete, which removed everything, state directory last; it
// must not ask the runtime again (a runc delete of nothing costs a fork and tens of ms
// in every RemoveContainer).
func TestConmonUndoAfterDeleteRunsNothing(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	calls := recordRuntimeCalls(t, r)
	if err := r.abandon(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if got := calls(); len(got) != 0 {
		t.Errorf("runtime calls = %q, want none", got)
	}
}

// TestStepArgsAreStable pins the undo arguments ConmonStep and CreateStep record: they
// are stored on disk.
func TestStepArgsAreStable(t *testing.T) {
	r := &Runtime{handler: "runc"}
	conmon, create := ConmonStep(r, "abc", "", false, StdinNone), CreateStep(&Pending{r: r, id: "abc"}, nil)
	for _, a := range []struct {
		kind journal.StepKind
		args map[string]string
	}{
		{conmon.Kind, conmon.Args},
		{create.Kind, create.Args},
	} {
		if !maps.Equal(a.args, map[string]string{"handler": "runc", "id": "abc"}) {
			t.Errorf("step %s records %v, want {handler: runc, id: abc}", a.kind, a.args)
		}
	}
	if StepConmon != "oci-conmon" || StepRuntimeContainer != "oci-container" {
		t.Errorf("step kinds %q and %q, were oci-conmon and oci-container", StepConmon, StepRuntimeContainer)
	}
}

// requireNoDescendant fails the test when a process of this test's tree has one of
// needles in its command line (NUL-separated arguments): it outlived what.
func requireNoDescendant(t *testing.T, what string, needles ...string) {
	t.Helper()
	for _, pid := range descendants(os.Getpid()) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		for _, n := range needles {
			if strings.Contains(string(b), n) {
				t.Fatalf("process %d (%q) outlived %s", pid, b, what)
			}
		}
	}
}
