package image

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containers/image/v5/docker"
	dockerref "github.com/containers/image/v5/docker/reference"
	"github.com/containers/image/v5/types"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

func TestRegistryHost(t *testing.T) {
	hub, _ := dockerref.ParseNormalizedNamed("busybox")
	own, _ := dockerref.ParseNormalizedNamed("registry.example:5000/team/app:v1")
	for _, c := range []struct {
		addr string
		img  dockerref.Named
		want string
	}{
		{"", own, "registry.example:5000"},
		{"", hub, "docker.io"},
		{"https://index.docker.io/v1/", own, "docker.io"},
		{"registry-1.docker.io", own, "docker.io"},
		{"index.docker.io", hub, "docker.io"},
		{"https://Registry.Example:5000/v2/team", hub, "registry.example:5000"},
		{"http://mirror.example", hub, "mirror.example"},
		{"mirror.example/path", hub, "mirror.example"},
	} {
		if got, err := registryHost(c.addr, c.img); err != nil || got != c.want {
			t.Errorf("registryHost(%q, %s) = %q, %v; want %q", c.addr, c.img, got, err, c.want)
		}
	}
	for _, bad := range []string{"https://", "https:///v2/", "user@host"} {
		if _, err := registryHost(bad, own); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "auth.server_address") {
			t.Errorf("registryHost(%q) = %v; want InvalidArgument naming auth.server_address", bad, err)
		}
	}
}

// The pull cache tells apart what is sent and where: the same credentials for another
// registry are another pull; two spellings of one registry are one.
func TestScopedAuthKey(t *testing.T) {
	img, _ := dockerref.ParseNormalizedNamed("busybox")
	key := func(a Auth) string {
		s, err := scope(a, img)
		if err != nil {
			t.Fatal(err)
		}
		return s.key()
	}
	base := Auth{Username: "u", Password: "p"}
	hub := key(Auth{Username: "u", Password: "p", ServerAddress: "https://index.docker.io/v1/"})
	if key(base) != hub {
		t.Error("docker.io and https://index.docker.io/v1/ are different keys")
	}
	if key(Auth{Username: "u", Password: "p", ServerAddress: "mirror.example"}) == hub {
		t.Error("credentials for another registry share the key")
	}
	if key(Auth{Auth: base64.StdEncoding.EncodeToString([]byte("u:p"))}) != hub {
		t.Error("auth and username/password of the same credential are different keys")
	}
	if key(Auth{Username: "u", Password: "q"}) == hub {
		t.Error("another password shares the key")
	}
}

// fakeRegistry challenges every request and records the Authorization headers it gets.
type fakeRegistry struct {
	*httptest.Server
	scheme string // "Basic" or "Bearer"
	mu     sync.Mutex
	auth   []string
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	r := &fakeRegistry{scheme: "Basic"}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// containers/image answers a Basic challenge anonymously with empty credentials
		// ("Basic Og==", base64 of ":"): that is no credential.
		if h := req.Header.Get("Authorization"); h != "" && h != "Basic Og==" {
			r.mu.Lock()
			r.auth = append(r.auth, h)
			r.mu.Unlock()
		}
		w.Header().Set("Docker-Distribution-Api-Version", "registry/2.0")
		if r.scheme == "Bearer" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="fake"`, r.URL))
		} else {
			w.Header().Set("WWW-Authenticate", `Basic realm="fake"`)
		}
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}`, http.StatusUnauthorized)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *fakeRegistry) host() string { return strings.TrimPrefix(r.URL, "http://") }

func (r *fakeRegistry) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.auth
	r.auth = nil
	return a
}

// Credentials reach only the registry whose host server_address names (the image's own
// when it is empty): a mirror on another host is tried anonymously, and credentials for the
// mirror are not sent to the image's registry. Driven through containers/image's own
// client against two local registries, mirror first.
func TestCredentialsGoOnlyToTheirRegistry(t *testing.T) {
	primary, mirror := newFakeRegistry(t), newFakeRegistry(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "registries.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`
[[registry]]
location = %q
insecure = true
[[registry.mirror]]
location = %q
insecure = true
`, primary.host(), mirror.host())), 0o644); err != nil {
		t.Fatal(err)
	}
	named, err := dockerref.ParseNormalizedNamed(primary.host() + "/private/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("kubelet:s3cret"))
	for _, c := range []struct {
		name            string
		auth            Auth
		scheme          string
		primary, mirror string // the Authorization each must see ("" = none)
	}{
		{"image's registry by default", Auth{Username: "kubelet", Password: "s3cret"}, "Basic", basic, ""},
		{"server_address spelled as a URL", Auth{Username: "kubelet", Password: "s3cret", ServerAddress: "http://" + primary.host() + "/v2/"}, "Basic", basic, ""},
		{"credentials of the mirror", Auth{Username: "kubelet", Password: "s3cret", ServerAddress: mirror.host()}, "Basic", "", basic},
		{"credentials of another registry", Auth{Username: "kubelet", Password: "s3cret", ServerAddress: "other.example"}, "Basic", "", ""},
		{"registry token", Auth{RegistryToken: "tok3n"}, "Bearer", "Bearer tok3n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			primary.scheme, mirror.scheme = c.scheme, c.scheme
			creds, err := scope(c.auth, named)
			if err != nil {
				t.Fatal(err)
			}
			sys := types.SystemContext{SystemRegistriesConfPath: conf, SystemRegistriesConfDirPath: filepath.Join(dir, "none")}
			done, err := creds.apply(&sys, filepath.Join(dir, "auth"))
			if err != nil {
				t.Fatal(err)
			}
			ref, err := docker.NewReference(named)
			if err != nil {
				t.Fatal(err)
			}
			if src, err := ref.NewImageSource(context.Background(), &sys); err == nil {
				src.Close()
				t.Fatal("the fake registries served an image")
			}
			done()
			if ents, _ := os.ReadDir(filepath.Join(dir, "auth")); len(ents) != 0 {
				t.Errorf("auth files left after the pull: %v", ents)
			}
			for _, r := range []struct {
				name string
				reg  *fakeRegistry
				want string
			}{{"primary", primary, c.primary}, {"mirror", mirror, c.mirror}} {
				got := r.reg.take()
				if r.want == "" && len(got) > 0 {
					t.Errorf("%s got Authorization %q, want none", r.name, got)
				}
				if r.want != "" && (len(got) == 0 || strings.Join(got, "") != strings.Repeat(r.want, len(got))) {
					t.Errorf("%s got Authorization %q, want %q", r.name, got, r.want)
				}
			}
		})
	}

	// A registry token for the mirror cannot be kept to it: refused by name.
	_, err = scope(Auth{RegistryToken: "tok3n", ServerAddress: mirror.host()}, named)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "auth.registry_token") || !strings.Contains(err.Error(), mirror.host()) {
		t.Errorf("registry token for the mirror: %v", err)
	}
}
