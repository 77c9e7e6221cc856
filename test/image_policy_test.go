package test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The node's containers files (registries.conf and its drop-ins, policy.json, auth.json)
// as the daemon reads them: each test writes its own into the node directory (see
// daemonOptions.nodeFiles) and pulls from loopback registries it starts itself.

// TestRegistriesConfMirrorAndBlocked: a registries.conf mirror serves a registry that has
// no address of its own, a registry blocked in a drop-in is refused with PermissionDenied
// naming the configuration (also when crijournal's own [[registries]] gives it a mirror),
// and a short name is resolved through unqualified-search-registries.
func TestRegistriesConfMirrorAndBlocked(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	conf := fmt.Sprintf(`
unqualified-search-registries = ["mirrored.example"]

[[registry]]
prefix = "mirrored.example"
location = "mirrored.example"
[[registry.mirror]]
location = %q
insecure = true
`, reg.host)
	blocked := fmt.Sprintf(`
[[registry]]
prefix = "blocked.example"
location = %q
insecure = true
blocked = true
`, reg.host)
	d := startDaemon(t, daemonOptions{
		nodeFiles: map[string]string{"registries.conf": conf, "registries.conf.d/50-blocked.conf": blocked},
		// A mirror of crijournal's own configuration does not unblock what the node blocks.
		registries: []registryMirror{{prefix: "blocked.example", location: reg.host, insecure: true}},
	})

	mirrored := "mirrored.example/" + testImageRepo + ":" + testImageTag
	d.pull(t, mirrored)
	imgs := d.images(t)
	if len(imgs) != 1 || !slices.Contains(imgs[0].RepoTags, mirrored) {
		t.Fatalf("after pulling %s through the registries.conf mirror crictl images lists %+v", mirrored, imgs)
	}

	_, stderr, err := d.crictl(t, "pull", "blocked.example/"+testImageRepo+":"+testImageTag)
	requireCode(t, "pull from a blocked registry", err, stderr, "PermissionDenied")
	for _, want := range []string{"blocked", filepath.Join(d.base, "registries.conf")} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the refused pull does not say %q: %s", want, stderr)
		}
	}
	if after := d.images(t); len(after) != 1 {
		t.Errorf("after the refused pull crictl images lists %+v, want only %s", after, mirrored)
	}

	// A short name: the one unqualified-search registry.
	short := testImageRepo + ":" + testImageTag
	d.pull(t, short)
	out := d.mustCrictl(t, "inspecti", "-o", "json", short)
	if !strings.Contains(out, imgs[0].ID) {
		t.Errorf("crictl inspecti %s does not find %s (%s): %s", short, mirrored, imgs[0].ID, out)
	}
	d.stopClean(t)
}

// TestSignaturePolicyRejects: a policy.json that rejects one registry refuses its pull with
// PermissionDenied naming the policy, stores nothing (no image, no layer), and lets other
// images through.
func TestSignaturePolicyRejects(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	policy := `{
  "default": [{"type": "insecureAcceptAnything"}],
  "transports": {"docker": {"rejected.example": [{"type": "reject"}]}}
}`
	d := startDaemon(t, daemonOptions{
		nodeFiles: map[string]string{"policy.json": policy},
		registries: append(reg.mirror(),
			registryMirror{prefix: "rejected.example", location: reg.host, insecure: true}),
	})

	_, stderr, err := d.crictl(t, "pull", "rejected.example/"+testImageRepo+":"+testImageTag)
	requireCode(t, "pull of an image the policy rejects", err, stderr, "PermissionDenied")
	if policyPath := filepath.Join(d.base, "policy.json"); !strings.Contains(stderr, policyPath) {
		t.Errorf("the refused pull does not name the policy %s: %s", policyPath, stderr)
	}
	if imgs := d.images(t); len(imgs) != 0 {
		t.Errorf("after the refused pull crictl images lists %+v", imgs)
	}
	if layers := storedLayers(t, d); len(layers) != 0 {
		t.Errorf("after the refused pull the storage holds layers %v", layers)
	}

	d.pull(t, testImage)
	if imgs := d.images(t); len(imgs) != 1 {
		t.Errorf("after pulling %s (accepted) crictl images lists %+v", testImage, imgs)
	}
	if layers := storedLayers(t, d); len(layers) == 0 {
		t.Error("after an accepted pull the storage holds no layer: storedLayers checks the wrong place")
	}
	d.stopClean(t)
}

// storedLayers lists the layer directories of the daemon's vfs storage.
func storedLayers(t *testing.T, d *daemon) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(d.storageRoot(), "vfs", "dir"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// authProxy is a loopback proxy in front of a registry that wants HTTP basic credentials.
type authProxy struct {
	host       string // 127.0.0.1:port
	user, pass string

	mu     sync.Mutex
	denied int // requests without the right credentials
	served int // requests passed on to the registry
}

// startAuthProxy serves the registry at registryHost on a new loopback port, for requests
// with user and pass only.
func startAuthProxy(t *testing.T, registryHost, user, pass string) *authProxy {
	t.Helper()
	target, err := url.Parse("http://" + registryHost)
	if err != nil {
		t.Fatal(err)
	}
	p := &authProxy{user: user, pass: pass}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, pw, ok := r.BasicAuth()
		p.mu.Lock()
		if !ok || u != p.user || pw != p.pass {
			p.denied++
			p.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="crijournal e2e"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		p.served++
		p.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.host = strings.TrimPrefix(srv.URL, "http://")
	return p
}

func (p *authProxy) counts() (denied, served int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.denied, p.served
}

// TestGlobalAuthFile: the node-wide auth.json gives the credentials of a registry that
// requires basic auth; a registry it has no entry for refuses the pull.
func TestGlobalAuthFile(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	known := startAuthProxy(t, reg.host, "e2e", "s3cret")
	unknown := startAuthProxy(t, reg.host, "other", "pa55")
	authJSON := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, known.host, base64.StdEncoding.EncodeToString([]byte("e2e:s3cret")))
	d := startDaemon(t, daemonOptions{nodeFiles: map[string]string{"auth.json": authJSON}})

	ref := known.host + "/" + testImageRepo + ":" + testImageTag
	d.pull(t, ref)
	if imgs := d.images(t); len(imgs) != 1 || !slices.Contains(imgs[0].RepoTags, ref) {
		t.Fatalf("after pulling %s crictl images lists %+v", ref, imgs)
	}
	if _, served := known.counts(); served == 0 {
		t.Error("the auth proxy passed no request on: the pull did not go through it")
	}

	_, stderr, err := d.crictl(t, "pull", unknown.host+"/"+testImageRepo+":"+testImageTag)
	if err == nil {
		t.Fatal("pull from a registry the auth file has no credentials for succeeded")
	}
	if denied, served := unknown.counts(); denied == 0 || served != 0 {
		t.Errorf("the second proxy denied %d and served %d requests; want denials only (stderr: %s)", denied, served, stderr)
	}
	d.stopClean(t)
}
