package server

import (
	"slices"
	"strings"
	"testing"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

func TestRestoredConfig(t *testing.T) {
	t.Parallel()
	archive := func(mounts ...specs.Mount) checkpoint.Archive {
		return checkpoint.Archive{
			Config: metadata.ContainerConfig{RootfsImageName: "busybox:1"},
			Spec: specs.Spec{Process: &specs.Process{Args: []string{"sh", "-c", "count"}, Env: []string{"PATH=/bin", "A=b=c"}, Cwd: "/w", Terminal: true},
				Mounts: mounts},
		}
	}
	request := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "counter", Attempt: 2},
		Image:    &runtimeapi.ImageSpec{Image: "/var/lib/kubelet/checkpoints/x.tar"},
		Command:  []string{"ignored"},
		Args:     []string{"ignored"},
		Labels:   map[string]string{"io.kubernetes.pod.name": "new"},
		Mounts:   []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/srv/new"}},
	}
	for _, tc := range []struct {
		name    string
		archive checkpoint.Archive
		missing string // "" when accepted
	}{
		{"no mounts", archive(), ""},
		{"the daemon's own mounts", archive(specs.Mount{Destination: "/etc/hosts", Type: "bind"}, specs.Mount{Destination: "/dev/shm", Type: "bind"},
			specs.Mount{Destination: "/proc", Type: "proc"}), ""},
		{"a bind mount the request gives", archive(specs.Mount{Destination: "/data", Type: "bind", Source: "/srv/old"}), ""},
		{"bind mounts the request lacks", archive(specs.Mount{Destination: "/data", Type: "bind"}, specs.Mount{Destination: "/secret", Type: "bind"},
			specs.Mount{Destination: "/other", Type: "bind"}), "/secret, /other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := restoredConfig(request, tc.archive, "busybox:1", "x.tar")
			if tc.missing != "" {
				if codeOf(err).String() != "InvalidArgument" || !strings.Contains(err.Error(), tc.missing) {
					t.Fatalf("restoredConfig: %v, want InvalidArgument naming %s", err, tc.missing)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GetImage().GetImage() != "busybox:1" || !slices.Equal(got.Command, []string{"sh", "-c", "count"}) || got.Args != nil ||
				got.WorkingDir != "/w" || !got.Tty || len(got.Envs) != 2 || string(got.Envs[1].Value) != "b=c" {
				t.Errorf("restoredConfig: %v: want the checkpointed image and process", got)
			}
			if got.GetMetadata().GetAttempt() != 2 || got.Labels["io.kubernetes.pod.name"] != "new" || len(got.Mounts) != 1 {
				t.Errorf("restoredConfig: %v: want the request's metadata, labels and mounts", got)
			}
			if request.Command[0] != "ignored" {
				t.Errorf("restoredConfig changed the request")
			}
		})
	}
}

func TestRestoreState(t *testing.T) {
	t.Parallel()
	step := func(kind journal.StepKind, status journal.StepStatus) journal.Step {
		return journal.Step{Kind: kind, Status: status, Args: map[string]string{checkpoint.ArgDir: "/r/x.restore"}}
	}
	for _, tc := range []struct {
		name     string
		steps    []journal.Step
		awaits   bool
		dir      string
		restored bool
	}{
		{"an ordinary container", []journal.Step{step(oci.StepRuntimeContainer, journal.StepDone)}, false, "", false},
		{"imported", []journal.Step{step(checkpoint.StepImport, journal.StepDone)}, true, "/r/x.restore", false},
		{"a restore under way", []journal.Step{step(checkpoint.StepImport, journal.StepDone), step(oci.StepRestore, journal.StepIntent)}, true, "/r/x.restore", false},
		{"a restore failed", []journal.Step{step(checkpoint.StepImport, journal.StepDone), step(oci.StepRestore, journal.StepUndone)}, true, "/r/x.restore", false},
		{"restored, its images removed", []journal.Step{step(checkpoint.StepImport, journal.StepUndone), step(oci.StepRestore, journal.StepUndone),
			step(oci.StepRestore, journal.StepDone)}, false, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := journal.Record{Steps: tc.steps}
			st := restoreStateOf(rec)
			if awaitsRestore(rec) != tc.awaits || st.dir != tc.dir || st.restored != tc.restored {
				t.Errorf("restoreStateOf: %+v, awaits %v; want dir %q, restored %v, awaits %v", st, awaitsRestore(rec), tc.dir, tc.restored, tc.awaits)
			}
		})
	}
}
