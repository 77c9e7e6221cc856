package server

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// TestTeardownOfUnknownOrHiddenID: Stop and Remove of an unknown ID succeed (per the CRI),
// of a hidden one (in the journal, never handed out) fail with NotFound and change nothing.
// The decision is taken on typed errors: an unknown ID that reads like the hidden answer
// ("... not yet created") is still unknown. It guards that the
// decision is made on the error's class, not by matching its message.
func TestTeardownOfUnknownOrHiddenID(t *testing.T) {
	calls := map[string]func(s *Server, id string) error{
		"StopPodSandbox": func(s *Server, id string) error {
			_, err := s.StopPodSandbox(context.Background(), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		},
		"RemovePodSandbox": func(s *Server, id string) error {
			_, err := s.RemovePodSandbox(context.Background(), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		},
		"RemoveContainer": func(s *Server, id string) error {
			_, err := s.RemoveContainer(context.Background(), &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		},
	}
	tests := []struct {
		name     string
		id       func(t *testing.T, s *Server, kind journal.Kind) string
		wantCode codes.Code
	}{
		{"unknown ID", func(*testing.T, *Server, journal.Kind) string { return "0123abcd" }, codes.OK},
		{"unknown ID that reads like the hidden answer", func(*testing.T, *Server, journal.Kind) string { return "is not yet created" }, codes.OK},
		{"hidden record, still being created", func(t *testing.T, s *Server, kind journal.Kind) string {
			rec, err := s.journal.Begin(journal.BeginRequest{Kind: kind, Name: "hidden", Fingerprint: "fp", Stage: "test stage"})
			if err != nil {
				t.Fatal(err)
			}
			return rec.ID
		}, codes.NotFound},
	}
	for call, do := range calls {
		kind := journal.KindSandbox
		if call == "RemoveContainer" {
			kind = journal.KindContainer
		}
		for _, tt := range tests {
			t.Run(call+"/"+tt.name, func(t *testing.T) {
				s := testServer(t)
				id := tt.id(t, s, kind)
				before := s.journal.List(nil)
				err := do(s, id)
				if got := status.Code(toStatus(err)); err != nil && got != tt.wantCode || err == nil && tt.wantCode != codes.OK {
					t.Fatalf("%s(%q) = %v (code %s), want code %s", call, id, err, got, tt.wantCode)
				}
				after := s.journal.List(nil)
				if len(after) != len(before) {
					t.Fatalf("%s(%q) changed the journal: %d records before, %d after", call, id, len(before), len(after))
				}
				for i := range after {
					if after[i].State != before[i].State {
						t.Errorf("%s(%q) changed record %s from %s to %s", call, id, after[i].ID, before[i].State, after[i].State)
					}
				}
				if tt.wantCode == codes.NotFound && !errors.Is(err, errNotYetCreated) {
					t.Errorf("%s(%q) = %v, want an error wrapping errNotYetCreated", call, id, err)
				}
			})
		}
	}
}
