package storage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestPullShortNameThroughRegistriesConf pulls short names as a node's registries.conf
// says, from a loopback registry: each unqualified-search registry in turn (one without the
// image, one that has it, one blocked), the image stored under the name that was pulled and
// found again by the short name; a name no candidate has fails with every candidate's
// reason; a blocked registry is refused with ErrRegistryBlocked.
func TestPullShortNameThroughRegistriesConf(t *testing.T) {
	requireRoot(t)
	requireBusybox(t)
	host := storagetest.StartRegistry(t)
	storagetest.PushBusybox(t, host, "team/busybox", "1.0")
	conf, confDir := nodeConf(t, fmt.Sprintf(`
unqualified-search-registries = ["empty.example", "mirrored.example", "blocked.example"]
short-name-mode = "permissive"

[[registry]]
prefix = "empty.example"
location = "%[1]s/nothing-here"
insecure = true

[[registry]]
prefix = "mirrored.example"
location = "%[1]s"
insecure = true

[[registry]]
prefix = "blocked.example"
location = "blocked.example"
blocked = true
`, host), nil)
	dir := t.TempDir()
	s, err := Open(context.Background(), Options{
		Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"), Driver: DriverVFS,
		RegistriesConf: conf, RegistriesConfDir: confDir,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()

	img, err := s.PullImage(ctx, "team/busybox:1.0", nil)
	if err != nil {
		t.Fatalf("PullImage(team/busybox:1.0): %v", err)
	}
	if want := "mirrored.example/team/busybox:1.0"; len(img.RepoTags) != 1 || img.RepoTags[0] != want {
		t.Errorf("pulled image tags %v, want [%s]", img.RepoTags, want)
	}
	if st, err := s.ImageStatus(ctx, "team/busybox:1.0"); err != nil || st.ID != img.ID {
		t.Errorf("ImageStatus by the short name = %v, %v; want %s", st.ID, err, img.ID)
	}

	_, err = s.PullImage(ctx, "team/missing:1.0", nil)
	if err == nil || errors.Is(err, ErrImageNotFound) {
		t.Errorf("PullImage of a name only a blocked registry could serve = %v, want an error that is not plain not-found", err)
	}
	for _, want := range []string{"empty.example/team/missing:1.0", "mirrored.example/team/missing:1.0", "blocked"} {
		if err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("the failed pull does not mention %q: %v", want, err)
		}
	}

	if _, err := s.PullImage(ctx, "blocked.example/team/busybox:1.0", nil); !errors.Is(err, ErrRegistryBlocked) || !strings.Contains(err.Error(), conf) {
		t.Errorf("PullImage from a blocked registry = %v, want ErrRegistryBlocked naming %s", err, conf)
	}
}
