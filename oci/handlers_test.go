package oci

import (
	"errors"
	"slices"
	"testing"
)

// TestHandlers: the default fills in for "", a configured handler is itself, and one not
// configured is an *UnknownHandlerError naming the configured ones.
func TestHandlers(t *testing.T) {
	h := NewHandlers("runc", slices.Values([]string{"runc", "crun", "kata"}))
	tests := []struct {
		asked   string
		want    string
		wantErr string
	}{
		{asked: "", want: "runc"},
		{asked: "runc", want: "runc"},
		{asked: "crun", want: "crun"},
		{asked: "gvisor", wantErr: `runtime handler "gvisor" is not configured (configured: crun, kata, runc)`},
	}
	for _, tt := range tests {
		t.Run(tt.asked, func(t *testing.T) {
			got, err := h.Lookup(tt.asked)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrUnknownHandler) || err.Error() != tt.wantErr {
					t.Fatalf("Lookup(%q) = %q, %v; want %q", tt.asked, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", tt.asked, got, err, tt.want)
			}
			if r := h.Resolve(tt.asked); r != tt.want {
				t.Errorf("Resolve(%q) = %q, want %q", tt.asked, r, tt.want)
			}
		})
	}
	if got := h.Names(); !slices.Equal(got, []string{"crun", "kata", "runc"}) {
		t.Errorf("Names = %q, want sorted", got)
	}
}
