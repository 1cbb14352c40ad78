//go:build integration

package integration

// Registry fixtures: Debian's docker-registry (distribution 2.8) on loopback with optional
// htpasswd auth, image and index pushes built in Go with deterministic digests, and a
// proxy that cuts blob downloads short.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/crypto/bcrypt"
)

// Credentials are a user name and password for the registry's htpasswd auth.
type Credentials struct{ Username, Password string }

// Registry is one docker-registry process serving plain HTTP on loopback.
type Registry struct {
	Addr string // "127.0.0.1:PORT", plain HTTP

	dir     string // config.yml, htpasswd, registry.log, storage/
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// Docker schema2 media types (the OCI ones come from ocispec).
const (
	mediaTypeDockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	mediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	mediaTypeDockerConfig       = "application/vnd.docker.container.image.v1+json"
	mediaTypeDockerLayerGzip    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// fixtureTime is the time stamped on every tar header and image config, so the same spec
// always gives the same digests.
var fixtureTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// aptMu serializes apt-get runs of tests that find a package missing.
var aptMu sync.Mutex

// ensureInstalled installs a Debian package if file is missing.
func ensureInstalled(t testing.TB, file, pkg string) {
	t.Helper()
	aptMu.Lock()
	defer aptMu.Unlock()
	if _, err := os.Stat(file); err == nil {
		return
	}
	t.Logf("%s missing: apt-get install -y %s", file, pkg)
	cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", pkg)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("apt-get install %s: %v\n%s", pkg, err, lastLines(string(out), 20))
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("after installing %s: %v", pkg, err)
	}
}

// freeLoopbackPort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRegistry runs /usr/bin/docker-registry on 127.0.0.1 and a free port, storage in a
// test temp dir, with htpasswd (bcrypt) auth if creds != nil. It returns once GET /v2/
// answers (200, or 401 with auth) and stops the registry in t.Cleanup.
func startRegistry(t testing.TB, creds *Credentials) *Registry {
	t.Helper()
	const bin = "/usr/bin/docker-registry"
	ensureInstalled(t, bin, "docker-registry")
	dir := t.TempDir()
	storage := filepath.Join(dir, "storage")
	if err := os.Mkdir(storage, 0o755); err != nil {
		t.Fatal(err)
	}
	authConf := ""
	if creds != nil {
		hash, err := bcrypt.GenerateFromPassword([]byte(creds.Password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		if err := os.WriteFile(htpasswd, []byte(creds.Username+":"+string(hash)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		authConf = fmt.Sprintf("auth:\n  htpasswd:\n    realm: rtshimd-test\n    path: %q\n", htpasswd)
	}
	// The port is picked free and then handed over; if another process takes it in
	// between, the registry exits and we try again with another port.
	var lastErr string
	for attempt := 0; attempt < 5; attempt++ {
		addr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
		// No http.debug section: no debug listener. Health checks of the storage
		// driver are off.
		conf := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %q
health:
  storagedriver:
    enabled: false
%s`, storage, addr, authConf)
		confPath := filepath.Join(dir, "config.yml")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(dir, "registry.log")
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		r := &Registry{Addr: addr, dir: dir, exited: make(chan struct{})}
		r.cmd = exec.Command(bin, "serve", confPath)
		// A clean environment: REGISTRY_* variables would override the config.
		r.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
		r.cmd.Stdout, r.cmd.Stderr = logf, logf
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := r.cmd.Start(); err != nil {
			logf.Close()
			t.Fatal(err)
		}
		go func() { _ = r.cmd.Wait(); logf.Close(); close(r.exited) }()
		if r.waitReady(30 * time.Second) {
			t.Cleanup(r.stop)
			return r
		}
		r.stop()
		log, _ := os.ReadFile(logPath)
		lastErr = lastLines(string(log), 30)
	}
	t.Fatalf("docker-registry did not start:\n%s", lastErr)
	return nil
}

// waitReady polls GET /v2/ until it answers 200 or 401, the process exits, or limit passes.
func (r *Registry) waitReady(limit time.Duration) bool {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		resp, err := client.Get("http://" + r.Addr + "/v2/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return true
			}
		}
		select {
		case <-r.exited:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// stop ends the registry: SIGTERM, then SIGKILL to its process group after 10s.
func (r *Registry) stop() {
	if r.stopped {
		return
	}
	r.stopped = true
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
		<-r.exited
	}
}

// Log returns what the registry has logged (level warn and above).
func (r *Registry) Log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "registry.log"))
	return string(b)
}

// Ref names repo at this registry with a tag ("127.0.0.1:PORT/repo:tag") or, if ref is a
// digest, by digest ("127.0.0.1:PORT/repo@sha256:...").
func (r *Registry) Ref(repo, ref string) string {
	if strings.HasPrefix(ref, "sha256:") {
		return r.Addr + "/" + repo + "@" + ref
	}
	return r.Addr + "/" + repo + ":" + ref
}

// File is one entry of a layer tar.
type File struct {
	Path     string // absolute in the image, e.g. "/etc/motd"
	Content  string
	Mode     int64 // permission (and setuid/setgid/sticky) bits; 0 means 0644 for files, 0755 for dirs, 0777 for symlinks
	Dir      bool
	Symlink  string   // target, if a symlink
	Whiteout bool     // write an AUFS whiteout ".wh.<name>" for Path (nothing else)
	Opaque   bool     // Path is a dir: write its dir entry, then ".wh..wh..opq" inside it
	Fifo     bool     // a named pipe
	CharDev  [2]int64 // a character device (major, minor), if either is set
	UID, GID int
}

// Layer is a tar of Files, written in the order given. Parent directories are not added:
// list them as Dir entries where they matter.
type Layer struct{ Files []File }

// ImageSpec is an image to build and push.
type ImageSpec struct {
	Layers   []Layer
	Config   ocispec.ImageConfig
	OS, Arch string // default "linux", runtime.GOARCH
	Variant  string
	DockerV2 bool // push as Docker schema2 instead of OCI
	// Annotations go on the image's manifest (OCI).
	Annotations map[string]string
}

// busyboxLayer is a layer with the host's static busybox as /bin/busybox, applet
// symlinks to it, /etc/passwd, /etc/group, /tmp and /root.
func busyboxLayer(t testing.TB) Layer {
	t.Helper()
	ensureInstalled(t, "/bin/busybox", "busybox-static")
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	files := []File{
		{Path: "/bin", Dir: true},
		{Path: "/bin/busybox", Content: string(bb), Mode: 0o755},
	}
	for _, applet := range []string{"sh", "ls", "cat", "id", "sleep", "echo", "true"} {
		files = append(files, File{Path: "/bin/" + applet, Symlink: "busybox"})
	}
	files = append(files,
		File{Path: "/etc", Dir: true},
		File{Path: "/etc/passwd", Content: "root:x:0:0:root:/root:/bin/sh\n" +
			"app:x:1000:1000:app:/home/app:/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		File{Path: "/etc/group", Content: "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n"},
		File{Path: "/root", Dir: true, Mode: 0o700},
		File{Path: "/tmp", Dir: true, Mode: 0o1777},
	)
	return Layer{Files: files}
}

// layerTar writes l as an uncompressed tar with fixed times.
func layerTar(t testing.TB, l Layer) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(h *tar.Header, content string) {
		h.ModTime, h.AccessTime, h.ChangeTime = fixtureTime, time.Time{}, time.Time{}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar %s: %v", h.Name, err)
		}
		if content != "" {
			if _, err := io.WriteString(tw, content); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range l.Files {
		if !path.IsAbs(f.Path) {
			t.Fatalf("layer file path %q is not absolute", f.Path)
		}
		name := strings.TrimPrefix(path.Clean(f.Path), "/")
		if name == "" {
			t.Fatalf("layer file path %q names the root", f.Path)
		}
		mode := f.Mode
		switch {
		case f.Whiteout:
			if mode == 0 {
				mode = 0o644
			}
			wh := path.Join(path.Dir(name), ".wh."+path.Base(name))
			write(&tar.Header{Typeflag: tar.TypeReg, Name: wh, Mode: mode, Uid: f.UID, Gid: f.GID}, "")
		case f.Opaque || f.Dir:
			if mode == 0 {
				mode = 0o755
			}
			write(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: f.UID, Gid: f.GID}, "")
			if f.Opaque {
				write(&tar.Header{Typeflag: tar.TypeReg, Name: name + "/.wh..wh..opq", Mode: 0o644, Uid: f.UID, Gid: f.GID}, "")
			}
		case f.Fifo:
			write(&tar.Header{Typeflag: tar.TypeFifo, Name: name, Mode: 0o644, Uid: f.UID, Gid: f.GID}, "")
		case f.CharDev != [2]int64{}:
			write(&tar.Header{Typeflag: tar.TypeChar, Name: name, Mode: 0o666, Devmajor: f.CharDev[0], Devminor: f.CharDev[1]}, "")
		case f.Symlink != "":
			if mode == 0 {
				mode = 0o777
			}
			write(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: f.Symlink, Mode: mode, Uid: f.UID, Gid: f.GID}, "")
		default:
			if mode == 0 {
				mode = 0o644
			}
			write(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: f.UID, Gid: f.GID, Size: int64(len(f.Content))}, f.Content)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipBytes compresses b with a header that carries no name or time.
func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Digest(b []byte) digest.Digest {
	sum := sha256.Sum256(b)
	return digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum[:]))
}

// regRequest makes one request to the registry with basic auth when creds != nil.
func (r *Registry) regRequest(t testing.TB, method, rawURL string, body []byte, contentType string, creds *Credentials) *http.Response {
	t.Helper()
	if !strings.HasPrefix(rawURL, "http://") && !strings.HasPrefix(rawURL, "https://") {
		rawURL = "http://" + r.Addr + rawURL
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if creds != nil {
		req.SetBasicAuth(creds.Username, creds.Password)
	}
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	return resp
}

// expect fails the test unless resp has the wanted status; it drains and closes resp.
func expect(t testing.TB, resp *http.Response, want int, what string) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		t.Fatalf("%s: %s, want %d: %s", what, resp.Status, want, b)
	}
}

// pushBlob uploads b to repo unless the registry has it, and returns its descriptor.
func (r *Registry) pushBlob(t testing.TB, repo string, b []byte, mediaType string, creds *Credentials) ocispec.Descriptor {
	t.Helper()
	d := sha256Digest(b)
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(b))}
	head := r.regRequest(t, http.MethodHead, "/v2/"+repo+"/blobs/"+d.String(), nil, "", creds)
	head.Body.Close()
	if head.StatusCode == http.StatusOK {
		return desc
	}
	resp := r.regRequest(t, http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil, "", creds)
	loc := resp.Header.Get("Location")
	expect(t, resp, http.StatusAccepted, "start blob upload to "+repo)
	base, _ := url.Parse("http://" + r.Addr + "/")
	u, err := base.Parse(loc)
	if err != nil || loc == "" {
		t.Fatalf("blob upload Location %q: %v", loc, err)
	}
	q := u.Query()
	q.Set("digest", d.String())
	u.RawQuery = q.Encode()
	resp = r.regRequest(t, http.MethodPut, u.String(), b, "application/octet-stream", creds)
	if got := resp.Header.Get("Docker-Content-Digest"); resp.StatusCode == http.StatusCreated && got != d.String() {
		t.Fatalf("blob upload: Docker-Content-Digest %q, want %s", got, d)
	}
	expect(t, resp, http.StatusCreated, "finish blob upload of "+d.String())
	return desc
}

// putManifest PUTs a manifest or index under ref (tag or digest) and returns its digest.
func (r *Registry) putManifest(t testing.TB, repo, ref string, body []byte, mediaType string, creds *Credentials) string {
	t.Helper()
	d := sha256Digest(body).String()
	resp := r.regRequest(t, http.MethodPut, "/v2/"+repo+"/manifests/"+ref, body, mediaType, creds)
	got := resp.Header.Get("Docker-Content-Digest")
	expect(t, resp, http.StatusCreated, "put manifest "+repo+":"+ref)
	if got != d {
		t.Fatalf("put manifest %s:%s: Docker-Content-Digest %q, want %s", repo, ref, got, d)
	}
	return d
}

// builtImage is an image's manifest, ready to PUT, and its platform.
type builtImage struct {
	manifest  []byte
	mediaType string
	config    string
	platform  ocispec.Platform
}

// pushImageBlobs uploads img's layers and config and returns the manifest for them.
func (r *Registry) pushImageBlobs(t testing.TB, repo string, img ImageSpec, creds *Credentials) builtImage {
	t.Helper()
	manifestType, configType, layerType := ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageConfig, ocispec.MediaTypeImageLayerGzip
	if img.DockerV2 {
		manifestType, configType, layerType = mediaTypeDockerManifest, mediaTypeDockerConfig, mediaTypeDockerLayerGzip
	}
	platform := ocispec.Platform{OS: img.OS, Architecture: img.Arch, Variant: img.Variant}
	if platform.OS == "" {
		platform.OS = "linux"
	}
	if platform.Architecture == "" {
		platform.Architecture = runtime.GOARCH
	}
	created := fixtureTime
	cfg := ocispec.Image{
		Created:  &created,
		Platform: platform,
		Config:   img.Config,
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{}},
	}
	var layers []ocispec.Descriptor
	for _, l := range img.Layers {
		raw := layerTar(t, l)
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, sha256Digest(raw))
		cfg.History = append(cfg.History, ocispec.History{Created: &created, CreatedBy: "rtshimd integration fixture"})
		layers = append(layers, r.pushBlob(t, repo, gzipBytes(t, raw), layerType, creds))
	}
	if layers == nil {
		layers = []ocispec.Descriptor{}
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgDesc := r.pushBlob(t, repo, cfgJSON, configType, creds)
	m := ocispec.Manifest{
		Versioned:   specs.Versioned{SchemaVersion: 2},
		MediaType:   manifestType,
		Config:      cfgDesc,
		Layers:      layers,
		Annotations: img.Annotations,
	}
	mJSON, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return builtImage{manifest: mJSON, mediaType: manifestType, config: cfgDesc.Digest.String(), platform: platform}
}

// Push uploads img's blobs to repo and PUTs its manifest under tag (an empty tag pushes
// by digest only). It returns the manifest and config digests.
func (r *Registry) Push(t testing.TB, repo, tag string, img ImageSpec, creds *Credentials) (manifestDigest, configDigest string) {
	t.Helper()
	b := r.pushImageBlobs(t, repo, img, creds)
	ref := tag
	if ref == "" {
		ref = sha256Digest(b.manifest).String()
	}
	return r.putManifest(t, repo, ref, b.manifest, b.mediaType, creds), b.config
}

// PushIndex pushes each image by digest, then an index of them under tag: a Docker
// manifest list if every image is DockerV2, else an OCI image index. It returns the
// index digest and the image manifest digests in order.
func (r *Registry) PushIndex(t testing.TB, repo, tag string, imgs []ImageSpec, creds *Credentials) (indexDigest string, manifests []string) {
	t.Helper()
	indexType := mediaTypeDockerManifestList
	for _, img := range imgs {
		if !img.DockerV2 {
			indexType = ocispec.MediaTypeImageIndex
		}
	}
	if len(imgs) == 0 {
		indexType = ocispec.MediaTypeImageIndex
	}
	idx := ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: indexType,
		Manifests: []ocispec.Descriptor{},
	}
	for _, img := range imgs {
		b := r.pushImageBlobs(t, repo, img, creds)
		d := r.putManifest(t, repo, sha256Digest(b.manifest).String(), b.manifest, b.mediaType, creds)
		manifests = append(manifests, d)
		p := b.platform
		idx.Manifests = append(idx.Manifests, ocispec.Descriptor{
			MediaType: b.mediaType, Digest: digest.Digest(d), Size: int64(len(b.manifest)), Platform: &p,
		})
	}
	body, err := json.Marshal(idx)
	if err != nil {
		t.Fatal(err)
	}
	return r.putManifest(t, repo, tag, body, indexType, creds), manifests
}

// startDroppingProxy is a reverse proxy on a new 127.0.0.1 port to target
// ("127.0.0.1:PORT"). It forwards everything, but a blob GET (path contains
// "/blobs/sha256:") whose response body is longer than afterBytes gets the status line,
// the headers (with the full Content-Length) and the first afterBytes bytes of the body,
// and then the connection is closed. Stopped in t.Cleanup. Returns its "127.0.0.1:PORT".
func startDroppingProxy(t testing.TB, target string, afterBytes int) string {
	t.Helper()
	targetURL := &url.URL{Scheme: "http", Host: target}
	transport := &http.Transport{DisableCompression: true}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targetURL)
			pr.Out.Host = pr.In.Host // the registry builds Location URLs from Host: keep them on the proxy
		},
		Transport: transport,
	}
	var (
		connsMu sync.Mutex
		conns   []net.Conn
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/blobs/sha256:") {
			rp.ServeHTTP(w, req)
			return
		}
		out := req.Clone(req.Context())
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = targetURL.Scheme, targetURL.Host
		out.Host = req.Host
		resp, err := transport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		head := make([]byte, afterBytes+1)
		n, err := io.ReadFull(resp.Body, head)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			// Short enough: forward it whole.
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(head[:n])
			return
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, bufrw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		connsMu.Lock()
		conns = append(conns, conn)
		connsMu.Unlock()
		defer conn.Close()
		h := resp.Header.Clone()
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
		h.Del("Connection")
		fmt.Fprintf(bufrw, "HTTP/1.1 %s\r\n", resp.Status)
		if resp.ContentLength >= 0 {
			fmt.Fprintf(bufrw, "Content-Length: %d\r\n", resp.ContentLength)
		}
		_, _ = bufrw.WriteString("Connection: close\r\n")
		_ = h.Write(bufrw)
		_, _ = bufrw.WriteString("\r\n")
		_, _ = bufrw.Write(head[:afterBytes])
		_ = bufrw.Flush() // the client sees the cut either way
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		transport.CloseIdleConnections()
	})
	return l.Addr().String()
}
