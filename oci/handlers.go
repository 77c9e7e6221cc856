package oci

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// ErrUnknownHandler is returned when a runtime handler is asked for that the node has not
// configured (its error is an *UnknownHandlerError).
var ErrUnknownHandler = errors.New("runtime handler not configured")

// UnknownHandlerError says which handler was asked for and which ones are configured.
type UnknownHandlerError struct {
	Handler    string
	Configured []string // sorted
}

func (e *UnknownHandlerError) Error() string {
	return fmt.Sprintf("runtime handler %q is not configured (configured: %s)", e.Handler, strings.Join(e.Configured, ", "))
}

// Is makes an *UnknownHandlerError ErrUnknownHandler.
func (e *UnknownHandlerError) Is(target error) bool { return target == ErrUnknownHandler }

// Handlers are the runtime handlers a node has configured (the RuntimeClass handlers, the
// keys of the runtimes setting) and the default one (default_runtime), which a pod that
// names none ("") gets. It is the one place that fills in the default handler and checks
// that a handler is configured; that the default is one of them is the configuration's
// check (config.Config.Validate).
type Handlers struct {
	names []string // sorted
	def   string
}

// NewHandlers returns the handlers names, of which def is the default.
func NewHandlers(def string, names iter.Seq[string]) Handlers {
	return Handlers{names: slices.Sorted(names), def: def}
}

// Names returns the configured handlers, sorted.
func (h Handlers) Names() []string { return slices.Clone(h.names) }

// Default returns the default handler.
func (h Handlers) Default() string { return h.def }

// Resolve returns the handler a pod that asks for name gets: name, or the default when
// name is "".
func (h Handlers) Resolve(name string) string {
	if name == "" {
		return h.def
	}
	return name
}

// Lookup returns the handler a pod that asks for name gets (see Resolve), or an
// *UnknownHandlerError when that handler is not configured.
func (h Handlers) Lookup(name string) (string, error) {
	name = h.Resolve(name)
	if _, found := slices.BinarySearch(h.names, name); !found {
		return "", &UnknownHandlerError{Handler: name, Configured: h.Names()}
	}
	return name, nil
}
