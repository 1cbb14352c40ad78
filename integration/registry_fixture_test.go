//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestRegistryFixtures checks the registry fixtures themselves with plain net/http.
func TestRegistryFixtures(t *testing.T) {
	creds := &Credentials{Username: "tester", Password: "s3cret-pass"}
	start := time.Now()
	r := startRegistry(t, creds)
	t.Logf("registry up at %s in %v", r.Addr, time.Since(start))

	// A 2-layer OCI image: busybox, then a layer with a whiteout and an opaque dir.
	top := Layer{Files: []File{
		{Path: "/etc/motd", Content: "hello from the top layer\n"},
		{Path: "/bin/ls", Whiteout: true},
		{Path: "/opt", Dir: true},
		{Path: "/opt/data", Opaque: true, UID: 1000, GID: 1000},
		{Path: "/opt/data/new", Content: "new", Mode: 0o600, UID: 1000, GID: 1000},
	}}
	img := ImageSpec{
		Layers: []Layer{busyboxLayer(t), top},
		Config: ocispec.ImageConfig{
			User: "1000:1000", Env: []string{"PATH=/bin", "GREETING=hi"},
			Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo $GREETING"},
			WorkingDir: "/opt/data", StopSignal: "SIGINT", Labels: map[string]string{"fixture": "oci"},
		},
	}
	start = time.Now()
	ociManifest, ociConfig := r.Push(t, "fixtures/oci", "v1", img, creds)
	t.Logf("pushed 2-layer OCI image (busybox) in %v: %s", time.Since(start), ociManifest)
	again, againConfig := r.Push(t, "fixtures/oci", "v1-again", img, creds)
	if again != ociManifest || againConfig != ociConfig {
		t.Errorf("same spec pushed twice gave %s/%s, then %s/%s", ociManifest, ociConfig, again, againConfig)
	}

	dockerImg := ImageSpec{
		Layers:   []Layer{{Files: []File{{Path: "/hello", Content: "docker v2\n"}}}},
		Config:   ocispec.ImageConfig{Cmd: []string{"/hello"}},
		DockerV2: true,
	}
	dockerManifest, dockerConfig := r.Push(t, "fixtures/docker", "latest", dockerImg, creds)

	platformImg := func(arch string, docker bool) ImageSpec {
		return ImageSpec{
			Layers:   []Layer{{Files: []File{{Path: "/arch", Content: arch + "\n"}}}},
			Config:   ocispec.ImageConfig{Cmd: []string{"/bin/cat", "/arch"}},
			Arch:     arch,
			Variant:  map[string]string{"arm64": "v8"}[arch],
			DockerV2: docker,
		}
	}
	start = time.Now()
	ociIndex, ociEntries := r.PushIndex(t, "fixtures/multi", "oci",
		[]ImageSpec{platformImg("amd64", false), platformImg("arm64", false)}, creds)
	t.Logf("pushed 2-platform OCI index in %v", time.Since(start))
	dockerList, dockerEntries := r.PushIndex(t, "fixtures/multi", "docker",
		[]ImageSpec{platformImg("amd64", true), platformImg("arm64", true)}, creds)
	if len(ociEntries) != 2 || len(dockerEntries) != 2 {
		t.Fatalf("index entries: %v, %v", ociEntries, dockerEntries)
	}

	client := &http.Client{Timeout: time.Minute}
	accept := strings.Join([]string{ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex,
		mediaTypeDockerManifest, mediaTypeDockerManifestList}, ", ")
	get := func(base, path string, auth bool) (*http.Response, []byte, error) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		if auth {
			req.SetBasicAuth(creds.Username, creds.Password)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, body, err
	}
	mustGet := func(path string) (*http.Response, []byte) {
		t.Helper()
		resp, body, err := get(r.Addr, path, true)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s: %s", path, resp.Status, body)
		}
		return resp, body
	}

	// Manifests by tag and by digest: media type, Docker-Content-Digest, body digest.
	for _, c := range []struct{ repo, tag, digest, mediaType string }{
		{"fixtures/oci", "v1", ociManifest, ocispec.MediaTypeImageManifest},
		{"fixtures/docker", "latest", dockerManifest, mediaTypeDockerManifest},
		{"fixtures/multi", "oci", ociIndex, ocispec.MediaTypeImageIndex},
		{"fixtures/multi", "docker", dockerList, mediaTypeDockerManifestList},
		{"fixtures/multi", ociEntries[1], ociEntries[1], ocispec.MediaTypeImageManifest},
		{"fixtures/multi", dockerEntries[0], dockerEntries[0], mediaTypeDockerManifest},
	} {
		for _, ref := range []string{c.tag, c.digest} {
			resp, body := mustGet("/v2/" + c.repo + "/manifests/" + ref)
			if ct := resp.Header.Get("Content-Type"); ct != c.mediaType {
				t.Errorf("%s:%s Content-Type %q, want %q", c.repo, ref, ct, c.mediaType)
			}
			if d := resp.Header.Get("Docker-Content-Digest"); d != c.digest {
				t.Errorf("%s:%s Docker-Content-Digest %q, want %s", c.repo, ref, d, c.digest)
			}
			if d := sha256Digest(body).String(); d != c.digest {
				t.Errorf("%s:%s body digest %s, want %s", c.repo, ref, d, c.digest)
			}
		}
	}

	// The OCI image: config digest, diff_ids of the uncompressed tars, layer contents.
	_, body := mustGet("/v2/fixtures/oci/manifests/v1")
	var m ocispec.Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.Digest.String() != ociConfig || m.Config.MediaType != ocispec.MediaTypeImageConfig || len(m.Layers) != 2 {
		t.Fatalf("manifest: %s", body)
	}
	_, cfgBody := mustGet("/v2/fixtures/oci/blobs/" + ociConfig)
	var cfg ocispec.Image
	if err := json.Unmarshal(cfgBody, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture == "" || cfg.Config.User != "1000:1000" || cfg.Config.WorkingDir != "/opt/data" ||
		len(cfg.RootFS.DiffIDs) != 2 || cfg.Config.StopSignal != "SIGINT" {
		t.Errorf("config: %s", cfgBody)
	}
	var busyboxBlob []byte
	for i, l := range m.Layers {
		_, blob := mustGet("/v2/fixtures/oci/blobs/" + l.Digest.String())
		if i == 0 {
			busyboxBlob = blob
		}
		if l.MediaType != ocispec.MediaTypeImageLayerGzip || l.Size != int64(len(blob)) || sha256Digest(blob) != l.Digest {
			t.Errorf("layer %d: descriptor %+v, blob of %d bytes, digest %s", i, l, len(blob), sha256Digest(blob))
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if sha256Digest(raw) != cfg.RootFS.DiffIDs[i] {
			t.Errorf("layer %d: diff_id %s, uncompressed digest %s", i, cfg.RootFS.DiffIDs[i], sha256Digest(raw))
		}
		var names []string
		tr := tar.NewReader(bytes.NewReader(raw))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if h.Name == "bin/sh" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox") {
				t.Errorf("bin/sh: %+v", h)
			}
			if h.Name == "opt/data/new" && (h.Mode != 0o600 || h.Uid != 1000) {
				t.Errorf("opt/data/new: %+v", h)
			}
		}
		want := []string{"bin/busybox", "etc/passwd", "tmp/"}
		if i == 1 {
			want = []string{"etc/motd", "bin/.wh.ls", "opt/data/", "opt/data/.wh..wh..opq", "opt/data/new"}
		}
		for _, w := range want {
			if !contains(names, w) {
				t.Errorf("layer %d lacks %s: %v", i, w, names)
			}
		}
	}

	// The Docker image's config and layer media types.
	_, body = mustGet("/v2/fixtures/docker/manifests/latest")
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != mediaTypeDockerConfig || m.Config.Digest.String() != dockerConfig ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != mediaTypeDockerLayerGzip {
		t.Errorf("docker manifest: %s", body)
	}

	// The index entries carry their platforms.
	_, body = mustGet("/v2/fixtures/multi/manifests/oci")
	var idx ocispec.Index
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 2 || idx.Manifests[0].Platform == nil || idx.Manifests[1].Platform == nil ||
		idx.Manifests[0].Platform.Architecture != "amd64" || idx.Manifests[1].Platform.Architecture != "arm64" ||
		idx.Manifests[1].Platform.Variant != "v8" || idx.Manifests[0].Platform.OS != "linux" ||
		idx.Manifests[0].Digest.String() != ociEntries[0] {
		t.Errorf("index: %s", body)
	}

	// Without credentials: 401 with a Basic challenge.
	for _, path := range []string{"/v2/", "/v2/fixtures/oci/manifests/v1", "/v2/fixtures/oci/blobs/" + ociConfig} {
		resp, body, err := get(r.Addr, path, false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("unauthenticated GET %s: %s %q: %s", path, resp.Status, resp.Header.Get("WWW-Authenticate"), body)
		}
	}
	wrong := *creds
	wrong.Password = "wrong"
	resp := r.regRequest(t, http.MethodGet, "/v2/", nil, "", &wrong)
	expect(t, resp, http.StatusUnauthorized, "GET /v2/ with a wrong password")

	// Through the dropping proxy: manifests and small blobs pass, a big blob is cut short.
	const after = 4096
	proxy := startDroppingProxy(t, r.Addr, after)
	resp, _, err := get(proxy, "/v2/fixtures/oci/manifests/v1", true)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != ociManifest {
		t.Errorf("manifest through proxy: %v %v", err, resp)
	}
	resp, body, err = get(proxy, "/v2/fixtures/oci/blobs/"+ociConfig, true)
	if err != nil || resp.StatusCode != http.StatusOK || sha256Digest(body).String() != ociConfig {
		t.Errorf("config blob through proxy: %v %v", err, resp)
	}
	resp, _, err = get(proxy, "/v2/fixtures/docker/blobs/"+m.Layers[0].Digest.String(), true) // the docker image's layer: small
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("small layer through proxy: %v %v", err, resp)
	}
	resp, body, err = get(proxy, "/v2/fixtures/oci/blobs/"+sha256Digest(busyboxBlob).String(), true)
	if err == nil || resp == nil || resp.StatusCode != http.StatusOK || len(body) != after ||
		resp.ContentLength != int64(len(busyboxBlob)) || !bytes.Equal(body, busyboxBlob[:after]) {
		t.Errorf("busybox layer (%d bytes) through proxy: err %v, got %d bytes, resp %v", len(busyboxBlob), err, len(body), resp)
	} else {
		t.Logf("busybox layer through proxy: %d of %d bytes, then %v", len(body), len(busyboxBlob), err)
	}
	// Unauthenticated through the proxy is still 401 (forwarded whole, it is small).
	resp, _, err = get(proxy, "/v2/fixtures/oci/blobs/"+sha256Digest(busyboxBlob).String(), false)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unauthenticated blob through proxy: %v %v", err, resp)
	}

	if t.Failed() {
		t.Logf("registry log:\n%s", lastLines(r.Log(), 40))
	}
}
