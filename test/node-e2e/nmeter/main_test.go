package main

import (
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	now := time.Date(2026, 12, 1, 20, 16, 4, 123456789, time.Local)
	for _, tc := range []struct{ format, want string }{
		{"%3t", "20:16:04.123"},
		{"%t", "20:16:04"},
		{"%6t", "20:16:04.123456"},
		{"at %1t, 100%%", "at 20:16:04.1, 100%"},
		{"%x", "%x"},
		{"50%", "50%"},
	} {
		if got := render(tc.format, now); got != tc.want {
			t.Errorf("render(%q) = %q, want %q", tc.format, got, tc.want)
		}
	}
}
