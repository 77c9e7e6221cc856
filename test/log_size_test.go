package test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestLogSizeMax: with log_size_max = 65536, a container that writes about 2 MiB to its
// log (and nothing rotates it: no kubelet) leaves a log no larger than that, holding its
// last line.
func TestLogSizeMax(t *testing.T) {
	t.Parallel()
	const bound = 65536
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{fmt.Sprintf("log_size_max = %d", bound)}})
	pod := d.containerPod(t, "logsize", false)
	podID := d.mustRunp(t, pod)
	writer := []string{"sh", "-c", `i=0; while [ $i -lt 40000 ]; do echo "line $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"; i=$((i+1)); done; sleep 3600`}
	id := d.run(t, podID, containerConfig(t, "writer", 0, writer), pod)
	logPath := d.inspect(t, id).Status.LogPath
	var size int
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		b, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		size = len(b)
		if !strings.Contains(string(b), "stdout F line 39999 ") {
			return errors.New("the last line is not logged yet")
		}
		return nil
	})
	if size > bound {
		t.Errorf("log %s is %d bytes, more than log_size_max %d", logPath, size, bound)
	}
	d.removePod(t, podID)
	d.stopClean(t)
}
