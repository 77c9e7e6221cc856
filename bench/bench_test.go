package bench

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestReportStatistics(t *testing.T) {
	r := &Report{samples: map[Op][]time.Duration{}, Pods: 3}
	for _, ms := range []int{5, 1, 3, 2, 4} {
		r.add(OpRunPodSandbox, time.Duration(ms)*time.Millisecond)
	}
	r.PerPod = []PodResult{
		{Retries: 2, Errors: []string{"DeadlineExceeded: context deadline exceeded", `Unknown: failed to reserve sandbox name "x": name "x" is reserved for "y"`}},
		{},
		{Err: "boom", Errors: []string{"boom"}},
	}
	r.finish()
	st := r.Ops[OpRunPodSandbox]
	if st.Count != 5 || st.P50 != 3*time.Millisecond || st.Max != 5*time.Millisecond || st.P50ms != 3 {
		t.Errorf("stats = %+v", st)
	}
	if r.RetriesTotal != 2 || r.Failed != 1 {
		t.Errorf("retries %d failed %d, want 2 and 1", r.RetriesTotal, r.Failed)
	}
	for kind, want := range map[string]int{"DeadlineExceeded": 1, "name is reserved": 1, "boom": 1} {
		if r.ErrorKinds[kind] != want {
			t.Errorf("error kind %q counted %d, want %d (all: %v)", kind, r.ErrorKinds[kind], want, r.ErrorKinds)
		}
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{status.Error(codes.Unknown, `name "x" is reserved for "y"`), true},
		{status.Error(codes.InvalidArgument, "bad name"), false},
		{errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		if got := retryable(tt.err); got != tt.want {
			t.Errorf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
