package nri

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	nrilog "github.com/containerd/nri/pkg/log"
)

// slogLogger hands the NRI library's log lines to the daemon's logger, so that they
// take its format and level (the library otherwise prints its own text lines on
// stderr), each with "component=nri".
type slogLogger struct{ log *slog.Logger }

func (l slogLogger) Debugf(ctx context.Context, format string, args ...any) {
	l.log.DebugContext(ctx, l.msg(format, args), "component", "nri")
}

func (l slogLogger) Infof(ctx context.Context, format string, args ...any) {
	l.log.InfoContext(ctx, l.msg(format, args), "component", "nri")
}

func (l slogLogger) Warnf(ctx context.Context, format string, args ...any) {
	l.log.WarnContext(ctx, l.msg(format, args), "component", "nri")
}

// Errorf logs at error level, except the library's note that WASM plugins are off,
// which is how this daemon is built (nri_no_wasm), not a failure: a debug line.
func (l slogLogger) Errorf(ctx context.Context, format string, args ...any) {
	msg := l.msg(format, args)
	if strings.Contains(msg, "WASM support is disabled") {
		l.log.DebugContext(ctx, msg, "component", "nri")
		return
	}
	l.log.ErrorContext(ctx, msg, "component", "nri")
}

func (slogLogger) msg(format string, args []any) string { return fmt.Sprintf(format, args...) }

var _ nrilog.Logger = slogLogger{}
