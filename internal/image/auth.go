package image

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	dockerref "github.com/containers/image/v5/docker/reference"
	"github.com/containers/image/v5/types"
	"github.com/sirupsen/logrus"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Auth is the credential a pull request carries (CRI AuthConfig).
type Auth struct {
	// ServerAddress is the registry the credentials belong to ("" = the image's own).
	ServerAddress      string
	Username, Password string
	Auth               string // base64 "user:password"
	IdentityToken      string
	RegistryToken      string
}

// scopedAuth is a request's credentials, checked, and the one registry host they may go to.
type scopedAuth struct {
	host                    string // normalized; "docker.io" for Docker Hub
	user, pass              string
	identityToken, regToken string
}

// key tells pulls apart for the pull cache: what is sent, and to which host.
func (a scopedAuth) key() string {
	return a.host + "\x00" + a.user + "\x00" + a.pass + "\x00" + a.identityToken + "\x00" + a.regToken
}

// dockerHubHosts are the names Docker Hub's credentials come under (kubelet's keyring and
// docker login write https://index.docker.io/v1/); containers/image calls it docker.io.
var dockerHubHosts = map[string]bool{"docker.io": true, "index.docker.io": true, "registry-1.docker.io": true, "registry.hub.docker.com": true}

// registryHost is the host of a server_address: the scheme and any path dropped, Docker
// Hub's aliases made docker.io. "" means the image's own registry.
func registryHost(serverAddress string, named dockerref.Named) (string, error) {
	if strings.TrimSpace(serverAddress) == "" {
		return dockerref.Domain(named), nil
	}
	h := strings.TrimSpace(serverAddress)
	h = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
	h, _, _ = strings.Cut(h, "/")
	h = strings.ToLower(h)
	if h == "" || strings.ContainsAny(h, " \t@") {
		return "", fmt.Errorf("auth.server_address %q names no registry host: %w", serverAddress, errdefs.ErrInvalidArgument)
	}
	if dockerHubHosts[h] {
		h = "docker.io"
	}
	return h, nil
}

// scope checks a request's credentials and names the registry they belong to.
func scope(a Auth, named dockerref.Named) (scopedAuth, error) {
	host, err := registryHost(a.ServerAddress, named)
	if err != nil {
		return scopedAuth{}, err
	}
	s := scopedAuth{host: host, user: a.Username, pass: a.Password, identityToken: a.IdentityToken, regToken: a.RegistryToken}
	if a.Auth != "" {
		dec, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return scopedAuth{}, fmt.Errorf("auth.auth is not base64 \"user:password\": %w", errdefs.ErrInvalidArgument)
		}
		u, p, ok := strings.Cut(string(dec), ":")
		if !ok {
			return scopedAuth{}, fmt.Errorf("auth.auth does not decode to \"user:password\": %w", errdefs.ErrInvalidArgument)
		}
		s.user, s.pass = u, p
	}
	// containers/image keeps a bearer registry token off other hosts only for the image's
	// own registry (below); it has no way to send one to a mirror alone.
	if s.regToken != "" && host != dockerref.Domain(named) {
		return scopedAuth{}, fmt.Errorf("auth.registry_token is for auth.server_address %q (%s), not the registry of %s (%s): a registry token can only be sent to the image's own registry: %w",
			a.ServerAddress, host, named, dockerref.Domain(named), errdefs.ErrInvalidArgument)
	}
	return s, nil
}

// apply gives sys the credentials for their registry only, and returns what removes the
// auth file it wrote (dir holds it while the pull runs).
//
// User name, password and identity token go in an auth.json of their own (AuthFilePath)
// keyed by the registry's host: containers/image looks credentials up per endpoint it
// contacts (mirrors and rewritten locations included) by that endpoint's host, so a host
// other than the credentials' gets none (anonymous). DockerAuthConfig would not do: it is
// one credential for every endpoint, and containers/image's own guard against sending it to
// mirrors knows only the image's registry, never server_address.
//
// A registry token has no place in auth.json. It is set only for the image's own registry
// (scope refuses the rest), with an empty DockerAuthConfig beside it: containers/image
// clears both for any endpoint on another host, so mirrors and rewritten locations never
// see the token.
func (a scopedAuth) apply(sys *types.SystemContext, dir string) (func(), error) {
	done := func() {}
	if a.user != "" || a.pass != "" || a.identityToken != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return done, fmt.Errorf("credentials for %s: %w", a.host, err)
		}
		f, err := os.CreateTemp(dir, "auth-*.json")
		if err != nil {
			return done, fmt.Errorf("credentials for %s: %w", a.host, err)
		}
		done = func() { _ = os.Remove(f.Name()) }
		type entry struct {
			Auth          string `json:"auth"`
			IdentityToken string `json:"identitytoken,omitempty"`
		}
		data, err := json.Marshal(struct {
			Auths map[string]entry `json:"auths"`
		}{map[string]entry{a.host: {
			// "user:password" even when both are empty: containers/image skips an entry
			// without the colon, identity token and all.
			Auth:          base64.StdEncoding.EncodeToString([]byte(a.user + ":" + a.pass)),
			IdentityToken: a.identityToken,
		}}})
		if err == nil {
			_, err = f.Write(data)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			done()
			return func() {}, fmt.Errorf("credentials for %s: write %s: %w", a.host, f.Name(), err)
		}
		sys.AuthFilePath = f.Name()
		logrus.WithField("registry", a.host).Debug("pull credentials scoped to their registry")
	}
	if a.regToken != "" {
		sys.DockerAuthConfig = &types.DockerAuthConfig{}
		sys.DockerBearerRegistryToken = a.regToken
	}
	return done, nil
}
