package creation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// The creation flows' tests drive the creation handle with fake steps: no root, no
// namespaces, no runtime. Each fake step records its undo by kind in the journal like a
// real one, and its undo notes that it ran.

const (
	fakeFirst  journal.StepKind = "fake-first"
	fakeSecond journal.StepKind = "fake-second"
)

// undoLog lists the undos run, in order, as "<kind> <arg>".
type undoLog struct {
	mu   sync.Mutex
	runs []string
}

func (u *undoLog) undo(ctx context.Context, rec journal.Record, step journal.Step) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.runs = append(u.runs, string(step.Kind)+" "+step.Args["thing"])
	return nil
}

func (u *undoLog) list() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.runs)
}

// flowEngine returns a server over a journal whose registry undoes the fake step kinds,
// and the extra ones with their undos.
func flowEngine(t *testing.T, extra ...fakeUndo) (*Engine, *undoLog) {
	t.Helper()
	undos := &undoLog{}
	reg := journal.NewRegistry()
	reg.Register(fakeFirst, undos.undo)
	reg.Register(fakeSecond, undos.undo)
	for _, u := range extra {
		reg.Register(u.kind, u.undo)
	}
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Logger: log, CacheTTL: time.Minute, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := New(j, log, nil)
	t.Cleanup(func() {
		if problems := j.Check(); len(problems) > 0 {
			t.Errorf("journal check: %v", problems)
		}
		j.Close()
	})
	return s, undos
}

// fakeUndo is the undo of a step kind of a test's own.
type fakeUndo struct {
	kind journal.StepKind
	undo journal.UndoFunc
}

// fakeStep is a step of kind that makes thing: run is its action.
func fakeStep[T any](kind journal.StepKind, thing string, run func(ctx context.Context) (T, error)) journal.Action[T] {
	return journal.Action[T]{Kind: kind, Stage: "making " + thing, Args: map[string]string{"thing": thing}, Run: run}
}

func returns[T any](v T) func(context.Context) (T, error) {
	return func(context.Context) (T, error) { return v, nil }
}

func fails(err error) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return 0, err }
}

// blocks runs until its context ends, then fails with the context's error.
func blocks(ctx context.Context) (int, error) {
	<-ctx.Done()
	return 0, fmt.Errorf("fake plugin: %w", ctx.Err())
}

func beginFlow(t *testing.T, s *Engine, ctx context.Context, name string) *Creation {
	t.Helper()
	c, existing, err := s.Begin(ctx, "test-create", journal.BeginRequest{Kind: journal.KindSandbox, Name: name, Fingerprint: "fp", Stage: "reserve"}, Same{})
	if err != nil || c == nil {
		t.Fatalf("begin = %v, %q, %v; want a new creation", c, existing.ExistingID, err)
	}
	return c
}

var long = Limit{Max: time.Minute}

// TestCreationStepsReturnTheirResults: each step's result comes back from Step; every
// step is recorded with its kind, stage and undo arguments, and done; finish creates the
// record with the object, and a retry of the same request gets its ID.
func TestCreationStepsReturnTheirResults(t *testing.T) {
	s, undos := flowEngine(t)
	ctx := context.Background()
	c := beginFlow(t, s, ctx, "pod")
	paths, err := Step(c, long, fakeStep(fakeFirst, "ns", returns(map[string]string{"net": "/run/ns/net"})))
	if err != nil || paths["net"] != "/run/ns/net" {
		t.Fatalf("first step = %v, %v", paths, err)
	}
	ips, err := Step(c, long, fakeStep(fakeSecond, "net", returns([]string{"10.0.0.2"})))
	if err != nil || !slices.Equal(ips, []string{"10.0.0.2"}) {
		t.Fatalf("second step = %v, %v", ips, err)
	}
	rec, err := c.Finish(map[string]any{"ips": ips})
	if err != nil || rec.State != journal.StateCreated {
		t.Fatalf("finish = %+v, %v; want created", rec, err)
	}
	rec, _ = s.journal.Get(c.rec.ID)
	var got []string
	for _, st := range rec.Steps {
		got = append(got, fmt.Sprintf("%s/%s/%s/%s", st.Kind, st.Stage, st.Args["thing"], st.Status))
	}
	want := []string{"fake-first/making ns/ns/done", "fake-second/making net/net/done"}
	if !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
	if string(rec.Object) != `{"ips":["10.0.0.2"]}` {
		t.Errorf("object %s", rec.Object)
	}
	if c2, existing, err := s.Begin(ctx, "test-create", journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: "fp"}, Same{}); c2 != nil || existing.ExistingID != rec.ID || err != nil {
		t.Errorf("the retry: %v, %q, %v; want the created ID", c2, existing.ExistingID, err)
	}
	if u := undos.list(); len(u) != 0 {
		t.Errorf("undos ran for a creation that succeeded: %q", u)
	}
}

// TestCreationFailures: a failed step, a failure between steps and a step cut off by its
// limit each roll the creation back, last step first (the failed step's own undo
// included: it may have done part of its work), free the name, and fail with an error
// that names the creation and the stage once, with the cause's code.
func TestCreationFailures(t *testing.T) {
	tests := []struct {
		name      string
		second    func(c *Creation) error
		wantIs    error  // the class the error wraps; nil for none
		wantMsg   string // the whole message after "rpc error: code = ... desc = "
		wantUndos []string
	}{
		{
			name: "failed step",
			second: func(c *Creation) error {
				_, err := Step(c, long, fakeStep(fakeSecond, "net", fails(errors.New("plugin said no"))))
				return err
			},
			wantMsg:   "sandbox pod: making net: plugin said no",
			wantUndos: []string{"fake-second net", "fake-first ns"},
		},
		{
			name: "failed step with a classed cause",
			second: func(c *Creation) error {
				_, err := Step(c, long, fakeStep(fakeSecond, "net", fails(classedf(errInvalid, "bad port %d", 0))))
				return err
			},
			wantIs:    errInvalid,
			wantMsg:   "sandbox pod: making net: bad port 0",
			wantUndos: []string{"fake-second net", "fake-first ns"},
		},
		{
			name:      "failure between steps",
			second:    func(c *Creation) error { return c.Fail("spec", classedf(errInvalid, "working dir is not absolute")) },
			wantIs:    errInvalid,
			wantMsg:   "sandbox pod: spec: working dir is not absolute",
			wantUndos: []string{"fake-first ns"},
		},
		{
			name: "step cut off by its limit",
			second: func(c *Creation) error {
				_, err := Step(c, Limit{Max: 50 * time.Millisecond, Setting: "network_timeout"}, fakeStep(fakeSecond, "net", blocks))
				return err
			},
			wantIs:    ErrTimedOut,
			wantMsg:   "sandbox pod: making net: not finished within network_timeout (50ms): fake plugin: context deadline exceeded",
			wantUndos: []string{"fake-second net", "fake-first ns"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, undos := flowEngine(t)
			c := beginFlow(t, s, context.Background(), "pod")
			if _, err := Step(c, long, fakeStep(fakeFirst, "ns", returns(1))); err != nil {
				t.Fatal(err)
			}
			err := tt.second(c)
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) || err == nil || err.Error() != tt.wantMsg {
				t.Errorf("error %q, want %q, of class %v", err, tt.wantMsg, tt.wantIs)
			}
			if tt.wantIs == nil && errors.Is(err, ErrTimedOut) {
				t.Errorf("error %q is classed as timed out", err)
			}
			if u := undos.list(); !slices.Equal(u, tt.wantUndos) {
				t.Errorf("undos %q, want %q", u, tt.wantUndos)
			}
			if _, err := s.journal.Get(c.rec.ID); !errors.Is(err, journal.ErrNotFound) {
				t.Errorf("the record is still there: %v", err)
			}
			if next := beginFlow(t, s, context.Background(), "pod"); next.rec.ID == c.rec.ID {
				t.Error("the next request got the rolled back record")
			}
		})
	}
}

// TestCreationOutlivingItsRequestIsCached: a step runs detached from the request, so a
// creation whose request ends during a step still finishes; it is cached for the retry,
// the request fails with DeadlineExceeded saying so, and the retry gets it.
func TestCreationOutlivingItsRequestIsCached(t *testing.T) {
	s, undos := flowEngine(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	c := beginFlow(t, s, ctx, "pod")
	slow := func(sctx context.Context) (int, error) {
		<-ctx.Done() // the request ends while the step runs
		return 7, sctx.Err()
	}
	if got, err := Step(c, long, fakeStep(fakeFirst, "ns", slow)); got != 7 || err != nil {
		t.Fatalf("step = %d, %v; want its result: a step outlives its request", got, err)
	}
	rec, err := c.Finish(1)
	if !errors.Is(err, ErrTimedOut) || !strings.Contains(err.Error(), "next retry") {
		t.Errorf("finish = %v, want ErrTimedOut saying the next retry gets it", err)
	}
	if rec.State != journal.StateCached {
		t.Errorf("state %s, want cached", rec.State)
	}
	_, existing, err := s.Begin(context.Background(), "test-create", journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: "fp"}, Same{})
	if existing.ExistingID != rec.ID || err != nil {
		t.Errorf("the retry got %q, %v; want the cached %s", existing.ExistingID, err, rec.ID)
	}
	if u := undos.list(); len(u) != 0 {
		t.Errorf("undos ran for a cached creation: %q", u)
	}
}

// TestFailedUndoIsNotTheRequestsError: when a creation fails and an undo of its rollback
// fails too, the request's error is the step's, and the failed undo is left to the
// journal's retries (the name released), not returned; a rollback that fails otherwise
// (here: the record already gone) is told in the request's error.
func TestFailedUndoIsNotTheRequestsError(t *testing.T) {
	const stuck journal.StepKind = "fake-stuck"
	t.Run("undo fails", func(t *testing.T) {
		s, _ := flowEngine(t, fakeUndo{stuck, func(context.Context, journal.Record, journal.Step) error {
			return errors.New("plugin unreachable")
		}})
		c := beginFlow(t, s, context.Background(), "pod")
		if _, err := Step(c, long, fakeStep(stuck, "a thing", returns(1))); err != nil {
			t.Fatal(err)
		}
		_, err := Step(c, long, fakeStep(fakeSecond, "another", fails(errors.New("step broke"))))
		if err == nil || !strings.Contains(err.Error(), "step broke") || strings.Contains(err.Error(), "rolling it back") {
			t.Fatalf("error %v, want the step's alone", err)
		}
		rec, gerr := s.journal.Get(c.rec.ID)
		if gerr != nil || rec.State != journal.StateUndoing || rec.HoldsName {
			t.Fatalf("record %+v, %v; want undoing, its name released", rec, gerr)
		}
	})
	t.Run("record gone", func(t *testing.T) {
		s, _ := flowEngine(t)
		c := beginFlow(t, s, context.Background(), "pod")
		if err := s.journal.Rollback(context.Background(), c.rec.ID); err != nil {
			t.Fatal(err)
		}
		err := c.Fail("a stage", errors.New("step broke"))
		if err == nil || !strings.Contains(err.Error(), "step broke") || !strings.Contains(err.Error(), "rolling it back") ||
			!errors.Is(err, journal.ErrNotFound) {
			t.Fatalf("error %v, want the step's and the rollback's", err)
		}
	})
}

const fakeThird journal.StepKind = "fake-third"

// TestPlanCommitsItsIntentsOnce: the steps of a plan are journaled in one commit, all
// before the first acts, then act in order, each handing its result over and marked
// done; the record's stage follows the step that acts.
func TestPlanCommitsItsIntentsOnce(t *testing.T) {
	s, undos := flowEngine(t, fakeUndo{fakeThird, func(context.Context, journal.Record, journal.Step) error { return nil }})
	ctx := context.Background()
	c := beginFlow(t, s, ctx, "pod")
	var got []string
	var stages []string
	before := s.journal.Stats().Commits
	p := c.Plan()
	observe := func(thing string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			rec, err := s.journal.Get(c.rec.ID)
			if err != nil {
				return "", err
			}
			for _, st := range rec.Steps {
				if st.Status != journal.StepIntent && st.Status != journal.StepDone {
					t.Errorf("%s acts with step %s %s", thing, st.Kind, st.Status)
				}
			}
			if len(rec.Steps) != 3 {
				t.Errorf("%s acts with %d steps journaled, want all 3", thing, len(rec.Steps))
			}
			stages = append(stages, rec.Stage)
			return thing, nil
		}
	}
	for _, k := range []journal.StepKind{fakeFirst, fakeSecond, fakeThird} {
		AddStep(p, long, fakeStep(k, string(k), observe(string(k))), func(r string) { got = append(got, r) })
	}
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	if n := s.journal.Stats().Commits - before; n != 1 {
		t.Errorf("%d commits for the plan's intents, want 1 (the done marks ride on the next)", n)
	}
	if want := []string{"fake-first", "fake-second", "fake-third"}; !slices.Equal(got, want) {
		t.Errorf("results %q, want %q", got, want)
	}
	if want := []string{"making fake-first", "making fake-second", "making fake-third"}; !slices.Equal(stages, want) {
		t.Errorf("stages seen as each step acts %q, want %q", stages, want)
	}
	rec, err := c.Finish(map[string]any{})
	if err != nil || rec.State != journal.StateCreated {
		t.Fatalf("finish = %+v, %v; want created", rec, err)
	}
	for _, st := range rec.Steps {
		if st.Status != journal.StepDone {
			t.Errorf("step %s %s, want done", st.Kind, st.Status)
		}
	}
	if u := undos.list(); len(u) != 0 {
		t.Errorf("undos ran for a creation that succeeded: %q", u)
	}
}

// TestPlanFailureUndoesEveryStep: a step of a plan that fails rolls the creation back,
// with the undo of every step of the plan, last first: those after it were journaled
// and never acted, and their undo finds nothing.
func TestPlanFailureUndoesEveryStep(t *testing.T) {
	s, undos := flowEngine(t)
	ctx := context.Background()
	c := beginFlow(t, s, ctx, "pod")
	p := c.Plan()
	ran := 0
	AddStep(p, long, fakeStep(fakeFirst, "ns", func(context.Context) (int, error) { ran++; return 1, nil }), nil)
	AddStep(p, long, fakeStep(fakeSecond, "files", fails(errors.New("disk full"))), nil)
	AddStep(p, long, fakeStep(fakeFirst, "shm", func(context.Context) (int, error) { ran++; return 1, nil }), nil)
	err := p.Run()
	if err == nil || !strings.Contains(err.Error(), "sandbox pod: making files: disk full") {
		t.Fatalf("run = %v, want the second step's failure", err)
	}
	if ran != 1 {
		t.Errorf("%d steps acted, want 1 (the one before the failure)", ran)
	}
	if want := []string{"fake-first shm", "fake-second files", "fake-first ns"}; !slices.Equal(undos.list(), want) {
		t.Errorf("undos %q, want %q", undos.list(), want)
	}
	if _, err := s.journal.Get(c.rec.ID); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("record after the rollback: %v, want it gone", err)
	}
}

// TestPlanStepsBesideActTogether: steps added beside each other act at the same time
// (each waits until all of its group have started; in turn they would wait for ever),
// the step after the group acts only once every step of the group is done, and every
// result is handed over before run returns.
func TestPlanStepsBesideActTogether(t *testing.T) {
	s, _ := flowEngine(t, fakeUndo{fakeThird, func(context.Context, journal.Record, journal.Step) error { return nil }})
	c := beginFlow(t, s, context.Background(), "pod")
	p := c.Plan()
	var started sync.WaitGroup
	started.Add(3)
	var done atomic.Int32
	together := func(thing string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			defer done.Add(1)
			started.Done()
			all := make(chan struct{})
			go func() { started.Wait(); close(all) }()
			select {
			case <-all:
				return thing, nil
			case <-time.After(10 * time.Second):
				return "", fmt.Errorf("%s: the other steps of its group never started beside it", thing)
			}
		}
	}
	var mu sync.Mutex
	got := map[string]bool{}
	use := func(r string) { mu.Lock(); got[r] = true; mu.Unlock() }
	AddStep(p, long, fakeStep(fakeFirst, "ns", together("ns")), use)
	AddStepBeside(p, long, fakeStep(fakeSecond, "files", together("files")), use)
	AddStepBeside(p, long, fakeStep(fakeThird, "shm", together("shm")), use)
	AddStep(p, long, fakeStep(fakeFirst, "network", func(context.Context) (string, error) {
		if n := done.Load(); n != 3 {
			return "", fmt.Errorf("network acted with %d of its group's 3 steps done", n)
		}
		return "network", nil
	}), use)
	if err := p.Run(); err != nil {
		t.Fatal(err)
	}
	for _, thing := range []string{"ns", "files", "shm", "network"} {
		if !got[thing] {
			t.Errorf("no result of %s handed over", thing)
		}
	}
	rec, err := s.journal.Get(c.rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range rec.Steps {
		if st.Status != journal.StepDone {
			t.Errorf("step %s %s, want done", st.Kind, st.Status)
		}
	}
}

// TestPlanFailureBesideWaitsForItsGroup: when a step of a group fails, the other steps of
// its group finish, no later step acts, every step of the plan is undone (last first),
// and the error is the failed step's.
func TestPlanFailureBesideWaitsForItsGroup(t *testing.T) {
	s, undos := flowEngine(t, fakeUndo{fakeThird, func(context.Context, journal.Record, journal.Step) error { return nil }})
	c := beginFlow(t, s, context.Background(), "pod")
	p := c.Plan()
	var slowDone, laterActed bool
	AddStep(p, long, fakeStep(fakeFirst, "ns", func(context.Context) (int, error) {
		time.Sleep(50 * time.Millisecond) // longer than its partner takes to fail
		slowDone = true
		return 1, nil
	}), nil)
	AddStepBeside(p, long, fakeStep(fakeSecond, "files", fails(errors.New("disk full"))), nil)
	AddStep(p, long, fakeStep(fakeThird, "network", func(context.Context) (int, error) { laterActed = true; return 1, nil }), nil)
	err := p.Run()
	if err == nil || !strings.Contains(err.Error(), "sandbox pod: making files: disk full") {
		t.Fatalf("run = %v, want the second step's failure", err)
	}
	if !slowDone {
		t.Error("run returned before the failed step's partner had finished")
	}
	if laterActed {
		t.Error("the step after the failed group acted")
	}
	if want := []string{"fake-second files", "fake-first ns"}; !slices.Equal(undos.list(), want) {
		t.Errorf("undos %q, want %q (the third's undo is not logged)", undos.list(), want)
	}
	if _, err := s.journal.Get(c.rec.ID); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("record after the rollback: %v, want it gone", err)
	}
}

// TestPlanStageIsAStepStillActing: while a group's steps act, the record's stage is that of
// one still acting, whichever set its stage last, so that inspect and a waiting retry name
// what the creation waits for (here a slow step beside one that ends, having set its stage
// after the slow one's).
func TestPlanStageIsAStepStillActing(t *testing.T) {
	for _, slowFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("slow added first %v", slowFirst), func(t *testing.T) {
			s, _ := flowEngine(t)
			c := beginFlow(t, s, context.Background(), "pod")
			p := c.Plan()
			release := make(chan struct{})
			slowStarted := make(chan struct{})
			slow := fakeStep(fakeFirst, "network", func(context.Context) (int, error) {
				close(slowStarted)
				<-release
				return 1, nil
			})
			fast := fakeStep(fakeSecond, "pause", func(context.Context) (int, error) {
				<-slowStarted
				// The worst case: its own stage set after the slow step's.
				return 1, s.journal.Staged(c.rec.ID, "making pause")
			})
			if slowFirst {
				AddStep(p, long, slow, nil)
				AddStepBeside(p, long, fast, nil)
			} else {
				AddStep(p, long, fast, nil)
				AddStepBeside(p, long, slow, nil)
			}
			done := make(chan error, 1)
			go func() { done <- p.Run() }()
			// The fast step is done, the slow one acts (until released).
			waited := testenv.Poll(3*time.Second, 10*time.Millisecond, func() error {
				rec, err := s.journal.Get(c.rec.ID)
				if err != nil {
					return err
				}
				fastDone := slices.ContainsFunc(rec.Steps, func(st journal.Step) bool { return st.Kind == fakeSecond && st.Status == journal.StepDone })
				if !fastDone || rec.Stage != "making network" {
					return fmt.Errorf("fast step done %v, stage %q while the slow step acts, want %q", fastDone, rec.Stage, "making network")
				}
				return nil
			})
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if waited != nil {
				t.Error(waited)
			}
		})
	}
}

// errInvalid is a class of a step's own error, as a resource package or the server makes
// one: the engine wraps it, so that it still decides the error's class.
var errInvalid = errors.New("invalid argument")

func classedf(class error, format string, args ...any) error { return newError(class, format, args...) }
