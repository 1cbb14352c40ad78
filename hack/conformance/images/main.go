// Command images builds, offline, every Linux image the CRI conformance suite (critest,
// sigs.k8s.io/cri-tools) pulls, and pushes them to a registry (plain HTTP). The images are
// made of a busybox binary and rtshimd's own stand-in programs (hack/conformance/standins);
// make conformance (hack/conformance/run.sh) runs it against a registry it starts.
//
// Repository paths drop the upstream registry host and keep the rest, so a runtime that maps
// each upstream registry onto the local one (registries.conf location rewrites) finds them:
//
//	registry.k8s.io/e2e-test-images/busybox:1.29-2    -> <registry>/e2e-test-images/busybox:1.29-2
//	gcr.io/k8s-staging-cri-tools/test-image-1:latest  -> <registry>/k8s-staging-cri-tools/test-image-1:latest
//	registry.k8s.io/pause:3.9, k8s.gcr.io/pause:3.9   -> <registry>/pause:3.9
//	public.ecr.aws/docker/library/busybox:1           -> <registry>/docker/library/busybox:1
//	docker.io/library/busybox:1 (mapped to <registry>/docker) -> the same
//
// One image cannot be built: critest pulls gcr.io/k8s-staging-cri-tools/test-image-digest
// by an upstream digest (sha256:9700f9a2...), which no other bytes can reproduce.
//
// Usage:
//
//	images [-set critest|node-e2e] -registry 127.0.0.1:PORT -busybox /path/busybox -bin DIR [-out FILE]
//	images [-set ...] -list
//
// -set node-e2e builds instead the images Kubernetes' node e2e suite pulls (make node-e2e,
// hack/node-e2e/run.sh), under repository paths that keep the upstream host
// (registry.k8s.io/e2e-test-images/agnhost:2.66.1 -> <registry>/registry.k8s.io/e2e-test-images/agnhost:2.66.1),
// for a runtime that maps each host onto <registry>/<host>; DIR then holds agnhost too.
//
// DIR holds the stand-in programs nginx, labutils, nnp and pause (rtshim-pause). Every
// file and image carries a fixed timestamp, so the same inputs give the same digests.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is the timestamp of every file, history entry and image.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// entry is one filesystem object of a layer.
type entry struct {
	Path     string // absolute path inside the image
	Mode     int64  // permission bits, setuid included
	UID, GID int
	Dir      bool
	Hardlink string // absolute path of the hard-link target
	Data     []byte
}

func dir(p string, mode int64) entry               { return entry{Path: p, Mode: mode, Dir: true} }
func file(p string, mode int64, data []byte) entry { return entry{Path: p, Mode: mode, Data: data} }
func text(p, s string) entry                       { return file(p, 0o644, []byte(s)) }

// image is one image and the tags it is pushed under.
type image struct {
	Repo   string
	Tags   []string
	Base   bool    // the busybox base layer first
	Extra  []entry // the image's own layer
	Config v1.Config
	Note   string
}

func main() {
	registry := flag.String("registry", "", "registry host:port to push to (plain HTTP)")
	busybox := flag.String("busybox", "", "busybox binary of the base layer; a dynamic one gets its ELF interpreter and libraries copied")
	binDir := flag.String("bin", "", "directory holding the stand-in programs nginx, labutils, nnp and pause (and for -set node-e2e and cluster agnhost, localhost.crt and localhost.key; for cluster also sample-apiserver and kitten and nautilus's .jpg and .json)")
	list := flag.Bool("list", false, "print the image list and exit")
	set := flag.String("set", "critest", "which suite's images: critest, node-e2e or cluster")
	out := flag.String("out", "", "write one 'reference digest' line per pushed tag to this file")
	flag.Parse()

	imagesOf := specs
	switch *set {
	case "critest":
	case "node-e2e":
		// agnhost's image carries curl, OpenBSD's nc and bash (the suite's exec hooks,
		// probes and networking specs run them there; busybox's nc has no -u): Debian's,
		// with their libraries.
		var tools []entry
		if !*list {
			var err error
			if tools, err = hostPrograms([][2]string{{"/usr/bin/curl", "/usr/bin/curl"}, {"/bin/nc.openbsd", "/usr/bin/nc"}, {"/bin/bash", "/bin/bash"}}); err != nil {
				fatalf("tools of the agnhost image: %v", err)
			}
		}
		imagesOf = func(h map[string][]byte) []image { return nodeE2ESpecs(h, tools) }
	case "cluster":
		// Beyond the node-e2e set's tools: dig and glibc's getent for the DNS specs' probers
		// (in agnhost and glibc-dns-testing). busybox stays busybox: upstream's ash keeps
		// environment names like data-1, and a spec reads ash's own error message.
		var tools, dns []entry
		if !*list {
			var err error
			if tools, err = hostPrograms([][2]string{{"/usr/bin/curl", "/usr/bin/curl"}, {"/bin/nc.openbsd", "/usr/bin/nc"}, {"/bin/bash", "/bin/bash"},
				{"/usr/bin/dig", "/usr/bin/dig"}, {"/usr/bin/getent", "/usr/bin/getent"}}); err != nil {
				fatalf("tools of the agnhost image: %v", err)
			}
			if dns, err = hostPrograms([][2]string{{"/usr/bin/dig", "/usr/bin/dig"}, {"/usr/bin/getent", "/usr/bin/getent"}}); err != nil {
				fatalf("tools of the glibc-dns-testing image: %v", err)
			}
		}
		imagesOf = func(h map[string][]byte) []image { return clusterSpecs(h, tools, dns) }
	default:
		fatalf("-set %q: want critest, node-e2e or cluster", *set)
	}
	if *list {
		for _, im := range imagesOf(nil) {
			for _, t := range im.Tags {
				fmt.Printf("%s:%s\t%s\n", im.Repo, t, im.Note)
			}
		}
		return
	}
	if *registry == "" || *busybox == "" || *binDir == "" {
		fatalf("-registry, -busybox and -bin are required")
	}
	helpers := map[string][]byte{}
	programs := []string{"pause", "nnp", "nginx", "labutils"}
	switch *set {
	case "node-e2e":
		programs = append(programs, "agnhost", "localhost.crt", "localhost.key")
	case "cluster":
		programs = append(programs, "agnhost", "localhost.crt", "localhost.key", "sample-apiserver",
			"kitten.jpg", "kitten.json", "nautilus.jpg", "nautilus.json")
	}
	for _, h := range programs {
		b, err := os.ReadFile(filepath.Join(*binDir, h))
		if err != nil {
			fatalf("stand-in program: %v", err)
		}
		helpers[h] = b
	}
	baseEntries, err := baseLayer(*busybox, helpers["labutils"])
	if err != nil {
		fatalf("base layer: %v", err)
	}
	base, err := layerOf(baseEntries)
	if err != nil {
		fatalf("base layer: %v", err)
	}

	start := time.Now()
	var lines []string
	for _, im := range imagesOf(helpers) {
		img, err := build(im, base)
		if err != nil {
			fatalf("%s: %v", im.Repo, err)
		}
		dgst, err := img.Digest()
		if err != nil {
			fatalf("%s: %v", im.Repo, err)
		}
		for _, t := range im.Tags {
			refStr := fmt.Sprintf("%s/%s:%s", *registry, im.Repo, t)
			if err := push(*registry, im.Repo, t, img); err != nil {
				fatalf("push %s: %v", refStr, err)
			}
			lines = append(lines, refStr+" "+dgst.String())
		}
	}
	fmt.Fprintf(os.Stderr, "images: pushed %d tags to %s in %v\n", len(lines), *registry, time.Since(start).Round(time.Millisecond))
	if *out != "" {
		if err := os.WriteFile(*out, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

// build assembles one image: layers, then a config with fixed dates.
func build(im image, base v1.Layer) (v1.Image, error) {
	var layers []v1.Layer
	if im.Base {
		layers = append(layers, base)
	}
	if len(im.Extra) > 0 {
		l, err := layerOf(im.Extra)
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	img := empty.Image
	for _, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "rtshimd hack/conformance/images: " + im.Repo}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = runtime.GOARCH, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = im.Config
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.MediaType(img, types.DockerManifestSchema2), nil
}

// specs lists every image critest v1.36 pulls on Linux (pkg/validate: consts.go,
// framework.DefaultLinuxContainerImage, security_context_linux.go, multi_container_linux.go;
// pkg/benchmark for the public.ecr.aws list). helpers may be nil when only listing.
func specs(helpers map[string][]byte) []image {
	const e2e = "e2e-test-images/"
	const cri = "k8s-staging-cri-tools/"
	shCmd := v1.Config{Env: []string{"PATH=" + defaultPath}, Cmd: []string{"sh"}}
	withUser := func(u string) v1.Config { c := shCmd; c.User = u; return c }

	marker := func(n string) []entry { return []entry{text("/"+n, n+"\n")} }

	return []image{
		{Repo: e2e + "busybox", Tags: []string{"1.29-2"}, Base: true, Config: shCmd,
			Note: "the default test container image"},
		{Repo: e2e + "nginx", Tags: []string{"1.14-2"}, Base: true, Extra: nginxFiles(helpers, 80), Config: nginxConfig(80),
			Note: "web server: the nginx stand-in on :80"},
		{Repo: cri + "hostnet-nginx-" + runtime.GOARCH, Tags: []string{"latest"}, Base: true, Extra: nginxFiles(helpers, 12003), Config: nginxConfig(12003),
			Note: "host-network web server: the nginx stand-in on :12003"},
		{Repo: e2e + "httpd", Tags: []string{"2.4.39-4"}, Base: true,
			Extra: []entry{
				dir("/usr", 0o755), dir("/usr/local", 0o755),
				dir("/usr/local/apache2", 0o755), dir("/usr/local/apache2/htdocs", 0o755),
				text("/usr/local/apache2/htdocs/index.html", "<html><body><h1>It works!</h1></body></html>\n"),
				dir("/usr/local/bin", 0o755),
				file("/usr/local/bin/httpd-foreground", 0o755, []byte("#!/bin/sh\n# httpd stand-in: busybox httpd in the foreground on :80\necho \"httpd: rtshimd conformance stand-in (busybox httpd) serving /usr/local/apache2/htdocs on :80\" >&2\nexec httpd -f -p 80 -h /usr/local/apache2/htdocs\n")),
			},
			Config: v1.Config{Env: []string{"PATH=" + defaultPath}, Cmd: []string{"httpd-foreground"}, WorkingDir: "/usr/local/apache2",
				ExposedPorts: map[string]struct{}{"80/tcp": {}}, StopSignal: "SIGTERM"},
			Note: "httpd stand-in (busybox httpd) on :80"},
		{Repo: e2e + "nonewprivs", Tags: []string{"1.3"}, Base: true,
			Extra:  []entry{dir("/usr", 0o755), dir("/usr/local", 0o755), dir("/usr/local/bin", 0o755), file("/usr/local/bin/nnp", 0o4755, helpers["nnp"])},
			Config: v1.Config{Env: []string{"PATH=" + defaultPath}, Entrypoint: []string{"/usr/local/bin/nnp"}},
			Note:   "setuid-root program printing its effective uid"},
		{Repo: "pause", Tags: []string{"3.9"}, Extra: []entry{file("/pause", 0o755, helpers["pause"])},
			Config: v1.Config{Entrypoint: []string{"/pause"}},
			Note:   "registry.k8s.io/pause:3.9 and k8s.gcr.io/pause:3.9 (rtshim-pause)"},

		{Repo: cri + "test-image-1", Tags: []string{"latest"}, Base: true, Extra: marker("test-image-1"), Config: shCmd},
		{Repo: cri + "test-image-2", Tags: []string{"latest"}, Base: true, Extra: marker("test-image-2"), Config: shCmd},
		{Repo: cri + "test-image-3", Tags: []string{"latest"}, Base: true, Extra: marker("test-image-3"), Config: shCmd},
		{Repo: cri + "test-image-latest", Tags: []string{"latest"}, Base: true, Extra: marker("test-image-latest"), Config: shCmd},
		{Repo: cri + "test-image-tags", Tags: []string{"1", "2", "3"}, Base: true, Extra: marker("test-image-tags"), Config: shCmd,
			Note: "one image, three tags"},
		// Two images, so that one tag can never show up as an extra RepoTag of the other.
		{Repo: cri + "test-image-tag", Tags: []string{"test"}, Base: true, Extra: marker("test-image-tag-test"), Config: shCmd},
		{Repo: cri + "test-image-tag", Tags: []string{"all"}, Base: true, Extra: marker("test-image-tag-all"), Config: shCmd},
		{Repo: cri + "test-image-user-uid", Tags: []string{"latest"}, Base: true, Config: withUser("1002")},
		{Repo: cri + "test-image-user-username", Tags: []string{"latest"}, Base: true, Config: withUser("www-data")},
		{Repo: cri + "test-image-user-uid-group", Tags: []string{"latest"}, Base: true, Config: withUser("1003:1004")},
		{Repo: cri + "test-image-user-username-group", Tags: []string{"latest"}, Base: true, Config: withUser("www-data:1004")},
		{Repo: cri + "test-image-predefined-group", Tags: []string{"latest"}, Base: true,
			Extra: []entry{
				dir("/etc", 0o755),
				text("/etc/passwd", passwd+"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n"),
				text("/etc/group", group+"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n"),
				dir("/home", 0o755),
				{Path: "/home/default-user", Mode: 0o755, UID: 1000, GID: 1000, Dir: true},
			},
			Config: withUser("1000"), Note: "uid 1000 in supplementary group 50000 through /etc/group"},

		// critest's image benchmarks (not run by make conformance) list public.ecr.aws images.
		{Repo: "docker/library/busybox", Tags: []string{"1.35.0-glibc", "1-uclibc", "1", "1-glibc", "1-musl"}, Base: true, Config: shCmd,
			Note: "the image benchmarks' default list (public.ecr.aws/docker/library/busybox)"},
	}
}

// nodeE2ESpecs lists the images the node e2e suite of Kubernetes v1.37 pulls for its
// [NodeConformance] specs (test/utils/image/manifest.go, test/e2e_node/image_list.go), under
// paths that keep the upstream host. helpers may be nil when only listing.
func nodeE2ESpecs(helpers map[string][]byte, tools []entry) []image {
	const e2e = "registry.k8s.io/e2e-test-images/"
	shCmd := v1.Config{Env: []string{"PATH=" + defaultPath}, Cmd: []string{"sh"}}
	// agnhost's own image (test/images/agnhost/Dockerfile): the real binary at /agnhost (and
	// /agnhost-2), porter's TLS pair at /localhost.crt and /localhost.key (netexec's https
	// hooks serve with it), a user and group defined in the image, /uploads, curl, nc and
	// bash (tools), and the ports it serves.
	agnhost := append([]entry{
		file("/agnhost", 0o755, helpers["agnhost"]),
		{Path: "/agnhost-2", Mode: 0o755, Hardlink: "/agnhost"},
		file("/localhost.crt", 0o644, helpers["localhost.crt"]),
		file("/localhost.key", 0o600, helpers["localhost.key"]),
		dir("/uploads", 0o755),
		dir("/etc", 0o755),
		text("/etc/passwd", passwd+"user-defined-in-image:x:1000:1000:Linux User,,,:/home/user-defined-in-image:/bin/sh\n"),
		text("/etc/group", group+"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"),
		dir("/home", 0o755),
		{Path: "/home/user-defined-in-image", Mode: 0o755, UID: 1000, GID: 1000, Dir: true},
	}, tools...)
	agnhostConfig := v1.Config{Env: []string{"PATH=" + defaultPath}, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"},
		ExposedPorts: map[string]struct{}{"80/tcp": {}, "8080/tcp": {}, "8081/tcp": {}, "9376/tcp": {}, "5000/tcp": {}}}
	nnp := []entry{dir("/usr", 0o755), dir("/usr/local", 0o755), dir("/usr/local/bin", 0o755), file("/usr/local/bin/nnp", 0o4755, helpers["nnp"])}
	nonroot := shCmd
	nonroot.User = "1234"
	nnpConfig := shCmd
	nnpConfig.Cmd = []string{"nnp"}
	return []image{
		{Repo: e2e + "agnhost", Tags: []string{"2.55", "2.66.1"}, Base: true, Extra: agnhost, Config: agnhostConfig,
			Note: "agnhost, the real binary (k8s.io/kubernetes/test/images/agnhost at the pinned version)"},
		{Repo: e2e + "busybox", Tags: []string{"1.37.0-2", "1.36.1-1", "1.29-2"}, Base: true, Config: shCmd,
			Note: "busybox (upstream, built by hack/tools.sh); the suite's by-digest busybox cannot be reproduced"},
		{Repo: e2e + "nginx", Tags: []string{"1.27.0-2", "1.28.0-2"}, Base: true, Extra: nginxFiles(helpers, 80), Config: nginxConfig(80),
			Note: "web server: the nginx stand-in on :80"},
		{Repo: e2e + "glibc-dns-testing", Tags: []string{"2.1.1"}, Base: true, Config: shCmd,
			Note: "glibc-dns-testing: the busybox is built against glibc too (hostname -f resolves through it)"},
		{Repo: e2e + "nonewprivs", Tags: []string{"1.4"}, Base: true, Extra: nnp, Config: nnpConfig,
			Note: "setuid-root program printing its effective uid"},
		{Repo: e2e + "nonroot", Tags: []string{"1.5"}, Base: true, Config: nonroot,
			Note: "busybox with USER 1234"},
		{Repo: "registry.k8s.io/pause", Tags: []string{"3.10.2", "3.10.1", "3.10"}, Extra: []entry{file("/pause", 0o755, helpers["pause"])},
			Config: v1.Config{Entrypoint: []string{"/pause"}}, Note: "pause (rtshim-pause)"},
	}
}

// clusterSpecs lists the images Kubernetes' e2e [Conformance] specs of v1.37 pull
// (test/utils/image/manifest.go; make cluster-conformance) beyond the control plane's, which
// the cluster's harness pushes: the node-e2e set with the DNS tools added, agnhost's
// previous tag as an image of its own, the sample API server, and kitten and
// nautilus (agnhost serving their picture). helpers may be nil when only listing.
func clusterSpecs(helpers map[string][]byte, tools, dns []entry) []image {
	const e2e = "registry.k8s.io/e2e-test-images/"
	imgs := nodeE2ESpecs(helpers, tools)
	var agnhost image
	for i := range imgs {
		switch imgs[i].Repo {
		case e2e + "agnhost":
			imgs[i].Tags = []string{"2.66.1"}
			agnhost = imgs[i]
		case e2e + "glibc-dns-testing":
			imgs[i].Extra = append(append([]entry{}, imgs[i].Extra...), dns...)
			imgs[i].Note += "; dig and getent from Debian"
		}
	}
	// with is agnhost with more files: an image of its own, so a spec that rolls from one tag
	// to the other sees a new image ID.
	with := func(repo, tag, note string, cmd []string, files ...entry) image {
		im := agnhost
		im.Repo, im.Tags, im.Note = repo, []string{tag}, note
		im.Extra = append(append([]entry{}, agnhost.Extra...), files...)
		if cmd != nil {
			im.Config.Cmd = cmd
		}
		return im
	}
	return append(imgs,
		with(e2e+"agnhost", "2.55", "agnhost (the previous tag): the same binary and a marker file", nil,
			text("/agnhost-prev", "2.55\n")),
		with(e2e+"kitten", "1.8", "agnhost test-webserver serving kitten.jpg and data.json (test/images/kitten);"+
			" /etc/os-release says Alpine Linux, as the image-volume spec reads it from upstream's base", []string{"test-webserver"},
			file("/kitten.jpg", 0o644, helpers["kitten.jpg"]), file("/data.json", 0o644, helpers["kitten.json"]),
			text("/etc/os-release", "NAME=\"Alpine Linux\"\nID=alpine\nPRETTY_NAME=\"Alpine Linux (rtshimd's kitten stand-in)\"\n")),
		with(e2e+"nautilus", "1.8", "agnhost test-webserver serving nautilus.jpg and data.json (test/images/nautilus)", []string{"test-webserver"},
			file("/nautilus.jpg", 0o644, helpers["nautilus.jpg"]), file("/data.json", 0o644, helpers["nautilus.json"])),
		image{Repo: e2e + "sample-apiserver", Tags: []string{"1.29.2"}, Base: true,
			Extra:  []entry{file("/sample-apiserver", 0o755, helpers["sample-apiserver"])},
			Config: v1.Config{Env: []string{"PATH=" + defaultPath}, Entrypoint: []string{"/sample-apiserver"}},
			Note:   "k8s.io/sample-apiserver at the release's version (upstream's 1.29.2 serves the same wardle API)"},
	)
}

// nginxFiles is the nginx stand-in's layer, listening on port.
func nginxFiles(helpers map[string][]byte, port int) []entry {
	return []entry{
		dir("/usr", 0o755), dir("/usr/sbin", 0o755),
		file("/usr/sbin/nginx", 0o755, helpers["nginx"]),
		dir("/etc", 0o755), dir("/etc/nginx", 0o755), dir("/etc/nginx/conf.d", 0o755),
		text("/etc/nginx/conf.d/default.conf", fmt.Sprintf("# rtshimd conformance nginx stand-in: only 'listen' is read\nserver {\n    listen       %d;\n    server_name  localhost;\n    root         /usr/share/nginx/html;\n}\n", port)),
		dir("/usr/share", 0o755), dir("/usr/share/nginx", 0o755), dir("/usr/share/nginx/html", 0o755),
		text("/usr/share/nginx/html/index.html", "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n<body><h1>Welcome to nginx!</h1><p>rtshimd conformance stand-in.</p></body></html>\n"),
		dir("/var", 0o755), dir("/var/log", 0o755), dir("/var/log/nginx", 0o755),
	}
}

// nginxConfig runs the nginx stand-in as the nginx image does.
func nginxConfig(port int) v1.Config {
	return v1.Config{
		Env:          []string{"PATH=" + defaultPath, "NGINX_VERSION=stand-in"},
		Cmd:          []string{"nginx", "-g", "daemon off;"},
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", port): {}},
		StopSignal:   "SIGTERM",
	}
}

const passwd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const group = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
lp:x:7:
mail:x:8:
kmem:x:9:
wheel:x:10:root
cdrom:x:11:
dialout:x:18:
floppy:x:19:
video:x:28:
audio:x:29:
tape:x:32:
www-data:x:33:
operator:x:37:
utmp:x:43:
plugdev:x:46:
staff:x:50:
lock:x:54:
netdev:x:82:
users:x:100:
nogroup:x:65534:
`

// baseLayer lays out a busybox root filesystem: /bin/busybox and one hard link per applet,
// the libraries a dynamic busybox needs, account files, and labutils for pgrep, ipcs and nmeter
// where the busybox lacks them.
//
// critest's MaskedPaths spec masks /bin/ls and expects `sh -c ls` to fail: that needs a
// busybox whose shell execs applets (Debian's dynamic build), not one that runs them in
// process (busybox-static, FEATURE_SH_STANDALONE).
func baseLayer(busybox string, labutils []byte) ([]entry, error) {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	outb, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %v", busybox, err)
	}
	applets := map[string]bool{}
	for _, a := range strings.Fields(string(outb)) {
		if a != "busybox" && !strings.ContainsAny(a, "/[") {
			applets[a] = true
		}
	}
	es := []entry{
		dir("/bin", 0o755), dir("/dev", 0o755), dir("/etc", 0o755), dir("/home", 0o755),
		dir("/lib", 0o755), dir("/proc", 0o555), dir("/root", 0o700), dir("/run", 0o755),
		dir("/sbin", 0o755), dir("/sys", 0o555), dir("/tmp", 0o1777), dir("/usr", 0o755),
		dir("/usr/bin", 0o755), dir("/usr/sbin", 0o755), dir("/usr/local", 0o755),
		dir("/usr/local/bin", 0o755), dir("/var", 0o755), dir("/var/run", 0o755),
		dir("/var/log", 0o755), dir("/var/spool", 0o755), dir("/var/spool/mail", 0o755),
		dir("/var/www", 0o755),
		text("/etc/passwd", passwd),
		text("/etc/group", group),
		{Path: "/etc/shadow", Mode: 0o600, Data: []byte("root:*:10933:0:99999:7:::\nnobody:*:10933:0:99999:7:::\n")},
		text("/etc/nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"),
		file("/bin/busybox", 0o755, bb),
	}
	names := make([]string, 0, len(applets))
	for a := range applets {
		names = append(names, a)
	}
	sort.Strings(names)
	for _, a := range names {
		es = append(es, entry{Path: "/bin/" + a, Mode: 0o755, Hardlink: "/bin/busybox"})
	}
	es = append(es, entry{Path: "/bin/[", Mode: 0o755, Hardlink: "/bin/busybox"})
	addedLabutils := false
	for _, a := range []string{"pgrep", "ipcs", "nmeter"} {
		if applets[a] {
			continue
		}
		if !addedLabutils {
			es = append(es, file("/bin/labutils", 0o755, labutils))
			addedLabutils = true
		}
		es = append(es, entry{Path: "/bin/" + a, Mode: 0o755, Hardlink: "/bin/labutils"})
	}
	libs, err := elfDeps(busybox)
	if err != nil {
		return nil, err
	}
	made := map[string]bool{"/lib": true}
	for _, l := range libs {
		for d := path.Dir(l.dst); d != "/" && !made[d]; d = path.Dir(d) {
			made[d] = true
			es = append(es, dir(d, 0o755))
		}
		es = append(es, file(l.dst, 0o755, l.data))
	}
	return es, nil
}

type lib struct {
	dst  string
	data []byte
}

var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// elfDeps returns the ELF interpreter (at its own path) and every needed shared library
// (under the first library directory that has it) of a dynamic executable; nil for a
// static one.
func elfDeps(bin string) ([]lib, error) {
	var out []lib
	seen := map[string]bool{}
	var walk func(p string, top bool) error
	walk = func(p string, top bool) error {
		f, err := elf.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if top {
			for _, prog := range f.Progs {
				if prog.Type != elf.PT_INTERP {
					continue
				}
				b, err := io.ReadAll(prog.Open())
				if err != nil {
					return err
				}
				interp := strings.TrimRight(string(b), "\x00")
				data, err := os.ReadFile(interp)
				if err != nil {
					return fmt.Errorf("interpreter %s: %v", interp, err)
				}
				seen[path.Base(interp)] = true
				out = append(out, lib{dst: interp, data: data})
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, n := range needed {
			if seen[n] {
				continue
			}
			seen[n] = true
			var src, dstDir string
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, n)); err == nil {
					src, dstDir = filepath.Join(d, n), d
					break
				}
			}
			if src == "" {
				return fmt.Errorf("library %s needed by %s not found", n, p)
			}
			data, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			out = append(out, lib{dst: path.Join(dstDir, n), data: data})
			if err := walk(src, false); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(bin, true); err != nil {
		return nil, err
	}
	return out, nil
}

// hostPrograms lays out programs of this machine (source, destination in the image) with
// the libraries they need and the directories of both, each path once, for an image whose
// base layer lacks them.
func hostPrograms(progs [][2]string) ([]entry, error) {
	var es []entry
	made := map[string]bool{"/": true}
	add := func(dst string, data []byte) {
		if made[dst] {
			return
		}
		var dirs []string
		for d := path.Dir(dst); !made[d]; d = path.Dir(d) {
			made[d] = true
			dirs = append([]string{d}, dirs...)
		}
		for _, d := range dirs {
			es = append(es, dir(d, 0o755))
		}
		made[dst] = true
		es = append(es, file(dst, 0o755, data))
	}
	for _, p := range progs {
		data, err := os.ReadFile(p[0])
		if err != nil {
			return nil, err
		}
		libs, err := elfDeps(p[0])
		if err != nil {
			return nil, err
		}
		add(p[1], data)
		for _, l := range libs {
			add(l.dst, l.data)
		}
	}
	return es, nil
}

// layerOf writes the entries to a tar and wraps it as a gzip-compressed layer.
func layerOf(es []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{
			Name:    strings.TrimPrefix(e.Path, "/"),
			Mode:    e.Mode,
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: epoch,
		}
		switch {
		case e.Dir:
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case e.Hardlink != "":
			h.Typeflag = tar.TypeLink
			h.Linkname = strings.TrimPrefix(e.Hardlink, "/")
		default:
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(e.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// push uploads an image's blobs (those the registry lacks) and its manifest under a tag,
// over plain HTTP with the registry v2 API (monolithic uploads; no auth).
func push(registry, repo, tag string, img v1.Image) error {
	base := "http://" + registry + "/v2/" + repo
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	type blob struct {
		digest v1.Hash
		open   func() (io.ReadCloser, error)
	}
	var blobs []blob
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		blobs = append(blobs, blob{d, l.Compressed})
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	blobs = append(blobs, blob{cfgName, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cfg)), nil }})
	for _, b := range blobs {
		resp, err := http.Head(base + "/blobs/" + b.digest.String())
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			continue
		}
		resp, err = http.Post(base+"/blobs/uploads/", "application/octet-stream", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("start upload of %s: %s", b.digest, resp.Status)
		}
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil {
			return err
		}
		q := loc.Query()
		q.Set("digest", b.digest.String())
		loc.RawQuery = q.Encode()
		rc, err := b.open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if err := put(loc, "application/octet-stream", data); err != nil {
			return fmt.Errorf("upload %s: %v", b.digest, err)
		}
	}
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	u, err := url.Parse(base + "/manifests/" + tag)
	if err != nil {
		return err
	}
	return put(u, string(mt), manifest)
}

func put(u *url.URL, contentType string, data []byte) error {
	req, err := http.NewRequest(http.MethodPut, u.String(), bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("PUT %s: %s: %s", u.Path, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "images: "+format+"\n", a...)
	os.Exit(1)
}
