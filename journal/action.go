package journal

import "context"

// Action is one creation step as a value: what the journal records as the step's intent
// (Kind, Stage and the undo's Args) and what acts (Run), made together by the one
// constructor of the package that owns the resource, from the same fields, so that the
// recorded intent and the action cannot disagree. A caller records the intent
// (Journal.Intents with Stage, Kind and Args), then calls Run, then marks the step done.
// T is what the step hands back to the flow that runs it (paths, IPs, ...).
type Action[T any] struct {
	// Kind names the step and its undo (registered by the same package); it is stored
	// on disk.
	Kind StepKind
	// Stage says what the step does, as inspect, logs, errors and waiting requests show it.
	Stage string
	// Args are everything the undo needs; they are stored on disk.
	Args map[string]string
	// Run acts. Once it has begun, what it made is undone through Kind and Args, even
	// when it fails part way or is interrupted by a crash.
	Run func(ctx context.Context) (T, error)
}
