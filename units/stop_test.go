package units

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/opencontainers/cgroups"
)

// fakeBus is systemd as the stop paths see it: each unit's states, answered in turn
// (the last one stays), or an error.
type fakeBus struct {
	states   map[string][]string // unit -> ActiveState answers; "" is a unit systemd does not know
	listErr  error               // ListUnitsByNames fails
	resetErr error               // ResetFailedUnit fails
	children map[string][]string // slice -> ConsistsOf
	propErr  error               // GetUnitProperty fails
	resets   []string
	closed   bool
}

func (b *fakeBus) ListUnitsByNamesContext(_ context.Context, names []string) ([]sddbus.UnitStatus, error) {
	if b.listErr != nil {
		return nil, b.listErr
	}
	var out []sddbus.UnitStatus
	for _, n := range names {
		st := b.states[n]
		state := ""
		if len(st) > 0 {
			state = st[0]
			if len(st) > 1 {
				b.states[n] = st[1:]
			}
		}
		if state == "" {
			// systemd lists a name it does not know as not-found, inactive.
			out = append(out, sddbus.UnitStatus{Name: n, LoadState: "not-found", ActiveState: "inactive"})
			continue
		}
		out = append(out, sddbus.UnitStatus{Name: n, LoadState: "loaded", ActiveState: state})
	}
	return out, nil
}

func (b *fakeBus) ResetFailedUnitContext(_ context.Context, name string) error {
	b.resets = append(b.resets, name)
	return b.resetErr
}

func (b *fakeBus) GetUnitPropertyContext(_ context.Context, unit, prop string) (*sddbus.Property, error) {
	if b.propErr != nil {
		return nil, b.propErr
	}
	if prop != "ConsistsOf" {
		return nil, errors.New("unexpected property " + prop)
	}
	p := sddbus.PropWants(b.children[unit]...) // a property holding a []string
	return &p, nil
}

func (b *fakeBus) Close() { b.closed = true }

// useBus makes dial return b (or err) for the test.
func useBus(t *testing.T, b *fakeBus, err error) {
	t.Helper()
	old := dial
	dial = func(context.Context) (bus, error) {
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	t.Cleanup(func() { dial = old })
}

// fakeManager is the library's manager of the unit: Destroy asks systemd to stop it,
// GetPaths are its cgroup directories.
type fakeManager struct {
	cgroups.Manager
	destroys   int
	destroyErr error
	paths      map[string]string
}

func (m *fakeManager) Destroy() error { m.destroys++; return m.destroyErr }

func (m *fakeManager) GetPaths() map[string]string { return m.paths }

func TestStop(t *testing.T) {
	const unit = "crijournal-c1.scope"
	unreachable := errors.New("dial unix /run/systemd/private: connect: connection refused")
	for _, tc := range []struct {
		name       string
		bus        *fakeBus
		dialErr    error
		destroyErr error
		wantErr    string // "" for success
		destroys   int
	}{
		{name: "running, stopped", bus: &fakeBus{states: map[string][]string{unit: {"active", ""}}}, destroys: 1},
		{name: "running, inactive after the stop", bus: &fakeBus{states: map[string][]string{unit: {"active", "inactive"}}}, destroys: 1},
		{name: "running, failed after the stop: reset", bus: &fakeBus{states: map[string][]string{unit: {"active", "failed"}}}, destroys: 1},
		{name: "not loaded: nothing to stop", bus: &fakeBus{}, destroys: 0},
		{name: "failed before: reset, nothing to stop", bus: &fakeBus{states: map[string][]string{unit: {"failed"}}}, destroys: 0},
		// Never taken for gone: no definite answer is an error, which the journal retries.
		{name: "systemd unreachable", bus: &fakeBus{}, dialErr: unreachable, wantErr: "systemd not reachable"},
		{name: "systemd does not answer", bus: &fakeBus{listErr: errors.New("timeout")}, wantErr: "ask systemd"},
		{name: "still stopping", bus: &fakeBus{states: map[string][]string{unit: {"active", "deactivating"}}},
			destroys: 1, wantErr: "still deactivating"},
		{name: "stop refused, still active", bus: &fakeBus{states: map[string][]string{unit: {"active"}}},
			destroyErr: errors.New("access denied"), destroys: 1, wantErr: "still active after the stop (access denied)"},
		{name: "gone, but its directories not removed", bus: &fakeBus{states: map[string][]string{unit: {"active", ""}}},
			destroyErr: errors.New("rmdir: busy"), destroys: 1, wantErr: "rmdir: busy"},
		{name: "failed, reset refused", bus: &fakeBus{states: map[string][]string{unit: {"failed"}}, resetErr: errors.New("no")},
			wantErr: "reset failed unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useBus(t, tc.bus, tc.dialErr)
			m := &fakeManager{destroyErr: tc.destroyErr}
			err := stop(context.Background(), unit, m)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("stop: %v, want success", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("stop: %v, want an error with %q", err, tc.wantErr)
			}
			if m.destroys != tc.destroys {
				t.Errorf("the library's stop ran %d times, want %d", m.destroys, tc.destroys)
			}
			if tc.dialErr == nil && !tc.bus.closed {
				t.Error("the connection to systemd was not closed")
			}
		})
	}
}

// A unit systemd no longer has may leave its directories in the v1 hierarchies it does
// not manage: stop removes them.
func TestStopRemovesWhatIsLeft(t *testing.T) {
	useBus(t, &fakeBus{}, nil)
	dir := filepath.Join(t.TempDir(), "cpuset", "crijournal-c1.scope")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &fakeManager{paths: map[string]string{"cpuset": dir}}
	if err := stop(context.Background(), "crijournal-c1.scope", m); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still there (%v)", dir, err)
	}
}

func TestActive(t *testing.T) {
	const unit = "kubepods-pod1.slice"
	for _, tc := range []struct {
		name    string
		bus     *fakeBus
		dialErr error
		want    bool
		wantErr bool
	}{
		{name: "active", bus: &fakeBus{states: map[string][]string{unit: {"active"}}}, want: true},
		{name: "activating", bus: &fakeBus{states: map[string][]string{unit: {"activating"}}}, want: true},
		{name: "not loaded", bus: &fakeBus{}},
		{name: "inactive", bus: &fakeBus{states: map[string][]string{unit: {"inactive"}}}},
		{name: "unreachable", bus: &fakeBus{}, dialErr: errors.New("refused"), wantErr: true},
		{name: "no answer", bus: &fakeBus{listErr: errors.New("timeout")}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useBus(t, tc.bus, tc.dialErr)
			got, err := Active(context.Background(), unit)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("Active = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// A slice that still holds others' active units is not stopped (that would stop them):
// an error, retried.
func TestCheckEmpty(t *testing.T) {
	const slice = "kubepods-pod1.slice"
	for _, tc := range []struct {
		name    string
		bus     *fakeBus
		wantErr string
	}{
		{name: "empty", bus: &fakeBus{}},
		{name: "only gone units", bus: &fakeBus{children: map[string][]string{slice: {"crijournal-a.scope"}},
			states: map[string][]string{"crijournal-b.scope": {"inactive"}}}},
		{name: "an active scope", bus: &fakeBus{children: map[string][]string{slice: {"crijournal-a.scope", "crijournal-b.scope"}},
			states: map[string][]string{"crijournal-b.scope": {"active"}}}, wantErr: "still holds crijournal-b.scope"},
		{name: "no answer", bus: &fakeBus{propErr: errors.New("timeout")}, wantErr: "ask systemd"},
		{name: "no answer about a child", bus: &fakeBus{children: map[string][]string{slice: {"crijournal-a.scope"}},
			listErr: errors.New("timeout")}, wantErr: "ask systemd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			useBus(t, tc.bus, nil)
			err := checkEmpty(context.Background(), slice)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("checkEmpty: %v, want %q", err, tc.wantErr)
			}
		})
	}
}
