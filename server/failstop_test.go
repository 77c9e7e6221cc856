package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// TestFullDiskStopsTheRuntime: once a journal commit fails on a
// full disk (a real one: a small tmpfs), Status reports RuntimeReady false with the
// reason, and every call but Status and Version is refused with Unavailable before its
// handler runs. After the space is freed, the file opens again and holds every record
// whose commit succeeded, and nothing else.
func TestFullDiskStopsTheRuntime(t *testing.T) {
	testenv.RequireRoot(t, "the server's full-disk test mounts a tmpfs")
	dir := testenv.SmallFS(t, "", 512<<10)
	path := filepath.Join(dir, "journal.db")
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(path, journal.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	s := &Server{journal: j, log: log, networks: networkSource{}, creations: creation.New(j, log, nil)}

	ctx := context.Background()
	var committed []string
	var failed error
	record := func(i int) error {
		rec, err := j.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: fmt.Sprintf("pod-%d", i), Fingerprint: "f"})
		if err != nil {
			return err
		}
		if _, err := j.Intents(rec.ID, journal.Intended{Stage: "s", Kind: "test-step", Args: map[string]string{"pad": strings.Repeat("x", 8<<10)}}); err != nil {
			return err
		}
		committed = append(committed, rec.ID)
		return nil
	}
	for i := range 3 { // before the disk is full
		if err := record(i); err != nil {
			t.Fatal(err)
		}
	}
	// bbolt reuses the pages the file already has: commits fail only once one needs a
	// page the full tmpfs cannot give. Records with 8 KiB of arguments get there fast.
	filler := testenv.FillFS(t, dir, "filler")
	for i := 3; i < 1000 && failed == nil; i++ {
		failed = record(i)
	}
	if !errors.Is(failed, journal.ErrFailed) || !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("after %d records the journal still commits on a full disk (last error %v); want ErrFailed wrapping ENOSPC", len(committed), failed)
	}
	t.Logf("the commit of record %d failed: %v", len(committed)+1, failed)

	resp, err := s.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.GetStatus().GetConditions() {
		if c.GetType() == runtimeapi.RuntimeReady && (c.GetStatus() || c.GetReason() != ReasonJournalFailed || !strings.Contains(c.GetMessage(), "no space left")) {
			t.Errorf("RuntimeReady = %+v, want false, reason %s, a message naming the cause", c, ReasonJournalFailed)
		}
	}
	for method, served := range map[string]bool{
		"/runtime.v1.RuntimeService/RunPodSandbox":    false,
		"/runtime.v1.RuntimeService/ListPodSandbox":   false,
		"/runtime.v1.ImageService/PullImage":          false,
		"/runtime.v1.RuntimeService/Status":           true,
		"/runtime.v1.RuntimeService/Version":          true,
		"/runtime.v1.RuntimeService/RemovePodSandbox": false,
	} {
		ran := false
		_, err := s.UnaryInterceptor(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
			ran = true
			return "ok", nil
		})
		if ran != served || (!served && status.Code(err) != codes.Unavailable) {
			t.Errorf("%s after the failure: handler ran %v, error %v; want it to run: %v, else Unavailable", method, ran, err, served)
		}
	}

	j.Close()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	again, err := journal.Open(path, journal.Options{Logger: log})
	if err != nil {
		t.Fatalf("reopen after freeing space: %v", err)
	}
	defer again.Close()
	if problems := again.Check(); len(problems) > 0 {
		t.Errorf("journal check: %v", problems)
	}
	var onDisk []string
	for _, r := range again.List(nil) {
		onDisk = append(onDisk, r.ID)
	}
	if strings.Join(onDisk, ",") != strings.Join(committed, ",") {
		t.Errorf("the file holds %d records, want the %d whose commit succeeded", len(onDisk), len(committed))
	}
}

// TestLowSpaceRefusesCreations: with the journal's disk full (a small tmpfs) and a space
// reserve, the runtime stays ready and says why it takes no new pods (JournalHasSpace
// false, naming the file), and a creation is refused with ResourceExhausted before the
// journal records anything; once space is freed, both change back.
func TestLowSpaceRefusesCreations(t *testing.T) {
	testenv.RequireRoot(t, "the server's low-space test mounts a tmpfs")
	dir := testenv.SmallFS(t, "", 4<<20)
	path := filepath.Join(dir, "journal.db")
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(path, journal.Options{Logger: log, SpaceReserve: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	s := &Server{journal: j, log: log, networks: networkSource{}, creations: creation.New(j, log, nil)}
	ctx := context.Background()
	conditions := func() map[string]*runtimeapi.RuntimeCondition {
		t.Helper()
		resp, err := s.Status(ctx, &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		conds := map[string]*runtimeapi.RuntimeCondition{}
		for _, c := range resp.GetStatus().GetConditions() {
			conds[c.GetType()] = c
		}
		return conds
	}
	if c := conditions()[ConditionJournalHasSpace]; !c.GetStatus() {
		t.Fatalf("%s = %+v before the disk is full, want true", ConditionJournalHasSpace, c)
	}

	filler := testenv.FillFS(t, dir, "filler")
	conds := conditions()
	if c := conds[ConditionJournalHasSpace]; c.GetStatus() || c.GetReason() != ReasonJournalLowSpace || !strings.Contains(c.GetMessage(), path) {
		t.Errorf("%s = %+v on a full disk, want false, reason %s, a message naming %s", ConditionJournalHasSpace, c, ReasonJournalLowSpace, path)
	}
	if !conds[runtimeapi.RuntimeReady].GetStatus() {
		t.Errorf("RuntimeReady = %+v on a full disk, want true: the kubelet must go on stopping pods", conds[runtimeapi.RuntimeReady])
	}
	_, err = s.creations.Reserve(ctx, beginReq("pod", "f"), creation.Same{})
	st := status.Convert(toStatus(err))
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), path) || !strings.Contains(st.Message(), "space is freed") {
		t.Errorf("a creation on a full disk: %v, want ResourceExhausted naming %s and what to do", st, path)
	}
	if recs := j.List(nil); len(recs) != 0 {
		t.Errorf("the refused creation left %d records", len(recs))
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if c := conditions()[ConditionJournalHasSpace]; !c.GetStatus() {
		t.Errorf("%s = %+v once space is freed, want true", ConditionJournalHasSpace, c)
	}
	if _, err := s.creations.Reserve(ctx, beginReq("pod", "f"), creation.Same{}); err != nil {
		t.Errorf("a creation once space is freed: %v", err)
	}
}
