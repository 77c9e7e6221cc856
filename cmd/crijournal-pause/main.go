// Command crijournal-pause is the pause process of a pod's shared pid namespace: the
// daemon starts it as "crijournal-pause pause <sandbox ID>" and it confines itself,
// then reaps orphans until SIGTERM (see package internal/pause). Build it without cgo.
package main

import (
	"os"

	"github.com/crijournal/crijournal/internal/pause"
)

func main() {
	os.Exit(pause.Main())
}
