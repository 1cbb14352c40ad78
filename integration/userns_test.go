//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/config"
)

// withUsernsShim has the runc shim declare user namespaces (a shim reports no features;
// its runc can).
func withUsernsShim() daemonOption {
	return withConfig(func(_ *Daemon, c *config.Config) {
		yes := true
		c.Handlers["runc-shim"].Features.UserNamespaces = &yes
	})
}

func usernsOptions(host uint32) *runtimeapi.UserNamespace {
	m := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: host, Length: 65536}}
	return &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD, Uids: m, Gids: m}
}

// TestUserNamespaces runs pods with hostUsers: false (userns_options mode POD) as
// kubelet sends them: the container's root is the mapped host ID, its image files are
// owned by its own root, its network, IPC and UTS namespaces belong to its user
// namespace, and the handlers that cannot are refused by name.
func TestUserNamespaces(t *testing.T) {
	e := newContainerEnv(t, withUsernsShim())
	ctx := ctxT(t)

	st, err := e.d.RS.Status(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"runc": true, "runc-shim": true, "runsc": false}
	for _, h := range st.GetRuntimeHandlers() {
		if w, ok := want[h.Name]; ok && h.GetFeatures().GetUserNamespaces() != w {
			t.Errorf("Status: handler %s user_namespaces = %v, want %v", h.Name, h.GetFeatures().GetUserNamespaces(), w)
		}
	}

	for i, handler := range []string{"runc", "runc-shim"} {
		for _, pid := range []runtimeapi.NamespaceMode{runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD} {
			name := fmt.Sprintf("userns-%s-%s", handler, strings.ToLower(pid.String()))
			t.Run(name, func(t *testing.T) {
				e.t = t
				host := uint32(200000 + i*65536)
				pod := podConfig(name, pid)
				pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsOptions(host)
				pod.Linux.Sysctls = map[string]string{"net.ipv4.ip_unprivileged_port_start": "80"}
				podID, err := e.d.RS.RunPodSandbox(ctx, pod, handler)
				if err != nil {
					t.Fatalf("RunPodSandbox: %v", err)
				}
				// Two volumes owned by the node's root: one idmapped as kubelet asks (the
				// pod's mappings), one plain.
				vol, plain := t.TempDir(), t.TempDir()
				for _, d := range []string{vol, plain} {
					if err := os.Chmod(d, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(d+"/file", []byte("x"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				opts := pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions
				cfg := e.ctrConfig("app", "sleep", "1000")
				cfg.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
				cfg.Mounts = []*runtimeapi.Mount{
					{ContainerPath: "/vol", HostPath: vol, UidMappings: opts.Uids, GidMappings: opts.Gids},
					{ContainerPath: "/plain", HostPath: plain},
				}
				id := e.run(podID, pod, cfg)
				if out, _ := e.exec(id, "stat", "-c", "%u:%g", "/vol", "/vol/file", "/plain/file"); out != "0:0\n0:0\n65534:65534" {
					t.Errorf("owners of /vol, /vol/file, /plain/file = %q, want the idmapped volume root's and the plain one the overflow ID", out)
				}
				if out, _ := e.exec(id, "sh", "-c", "echo y > /vol/new && echo ok; echo y > /plain/new || echo refused"); out != "ok\nrefused" {
					t.Errorf("writes to the idmapped and the plain volume: %q", out)
				}
				if fi, err := os.Stat(vol + "/new"); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
					t.Errorf("a file the container's root wrote through the idmapped volume is owned on disk by %v (%v), want 0", fi.Sys(), err)
				}
				other := e.ctrConfig("other-mapping", "true")
				other.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
				wrong := []*runtimeapi.IDMapping{{ContainerId: 0, HostId: 500000, Length: 65536}}
				other.Mounts = []*runtimeapi.Mount{{ContainerPath: "/vol", HostPath: vol, UidMappings: wrong, GidMappings: wrong}}
				if _, err := e.d.RS.CreateContainer(ctx, podID, other, pod); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "config.mounts[0].uidMappings") {
					t.Errorf("a mount with other mappings than the pod's: %v", err)
				}

				if out, _ := e.exec(id, "cat", "/proc/self/uid_map"); strings.Join(strings.Fields(out), " ") != fmt.Sprintf("0 %d 65536", host) {
					t.Errorf("uid_map = %q", out)
				}
				if out, _ := e.exec(id, "cat", "/proc/self/gid_map"); strings.Join(strings.Fields(out), " ") != fmt.Sprintf("0 %d 65536", host) {
					t.Errorf("gid_map = %q", out)
				}
				// The image's files are its root's (not the overflow ID), so root can write.
				if out, _ := e.exec(id, "stat", "-c", "%u:%g", "/bin", "/etc"); out != "0:0\n0:0" {
					t.Errorf("owner of /bin, /etc = %q, want 0:0", out)
				}
				if out, _ := e.exec(id, "sh", "-c", "touch /etc/written && echo ok"); out != "ok" {
					t.Errorf("write to the rootfs as the container's root: %q", out)
				}
				// Namespaces owned by the pod's user namespace: its root set the hostname
				// and the sysctl there (runc writes both from inside).
				if out, _ := e.exec(id, "hostname"); out != name {
					t.Errorf("hostname = %q", out)
				}
				if out, _ := e.exec(id, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"); out != "80" {
					t.Errorf("ip_unprivileged_port_start = %q", out)
				}
				// The rootfs bind and idmapped volumes on the node sit behind a directory only
				// the pod's root may enter (the container directories are searchable by all).
				guard := filepath.Join(e.d.RunRoot, "containers", id, "userns")
				if fi, err := os.Stat(guard); err != nil || fi.Mode().Perm() != 0o700 || fi.Sys().(*syscall.Stat_t).Uid != host {
					t.Errorf("guard %s: %v %v, want 0700 owned by %d", guard, fi.Mode(), err, host)
				}
				// Seen from the node, the process runs as the mapped ID.
				pidOnHost := verbosePid(t, e.d, id)
				statusFile, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pidOnHost))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(statusFile), fmt.Sprintf("Uid:\t%d\t%d", host, host)) {
					t.Errorf("host /proc/%d/status: %s", pidOnHost, grepLine(string(statusFile), "Uid:"))
				}
				self, _ := os.Readlink("/proc/self/ns/user")
				if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pidOnHost)); ns == "" || ns == self {
					t.Errorf("container user namespace %q, the node's is %q", ns, self)
				}

				// A container asking for the node's user namespace in this pod is refused.
				bad := e.ctrConfig("node-userns", "true")
				bad.Linux.SecurityContext.NamespaceOptions.UsernsOptions = &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}
				if _, err := e.d.RS.CreateContainer(ctx, podID, bad, pod); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "userns_options.mode NODE") {
					t.Errorf("container with userns mode NODE in a userns pod: %v", err)
				}

				// The pod outlives a kill -9 of the daemon with its user namespace.
				e.d.Restart(true)
				if out, _ := e.exec(id, "cat", "/proc/self/uid_map"); !strings.Contains(out, fmt.Sprint(host)) {
					t.Errorf("after restart, uid_map = %q", out)
				}
				e.removePod(podID)
			})
		}
	}
	e.t = t

	// Requests kubelet validation would not send, and handlers that cannot, are refused
	// by name; nothing is left of them.
	two := usernsOptions(300000)
	two.Uids = append(two.Uids, &runtimeapi.IDMapping{ContainerId: 65536, HostId: 400000, Length: 1})
	noRoot := usernsOptions(300000)
	noRoot.Gids = []*runtimeapi.IDMapping{{ContainerId: 1, HostId: 300000, Length: 65536}}
	for _, c := range []struct {
		name    string
		handler string
		opts    *runtimeapi.UserNamespace
		hostPID bool
		code    codes.Code
		want    string
	}{
		{"two-mappings", "runc", two, false, codes.InvalidArgument, "userns_options.uids has 2 mappings"},
		{"no-root", "runc", noRoot, false, codes.InvalidArgument, "userns_options.gids[0] maps container ID 1"},
		{"mode-container", "runc", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}, false, codes.InvalidArgument, "userns_options.mode CONTAINER is not supported"},
		{"mode-target", "runc", &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}, false, codes.InvalidArgument, "userns_options.mode TARGET is not supported"},
		{"host-pid", "runc", usernsOptions(300000), true, codes.InvalidArgument, "namespace_options.pid NODE"},
		{"runsc", "runsc", usernsOptions(300000), false, codes.FailedPrecondition, "feature user_namespaces"},
	} {
		pod := podConfig("userns-bad-"+c.name, runtimeapi.NamespaceMode_CONTAINER)
		pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = c.opts
		if c.hostPID {
			pod.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_NODE
		}
		_, err := e.d.RS.RunPodSandbox(ctx, pod, c.handler)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: RunPodSandbox = %v, want %s containing %q", c.name, err, c.code, c.want)
		}
	}
	if pods, err := e.d.RS.ListPodSandbox(ctx, nil); err != nil || len(pods) != 0 {
		t.Errorf("pods left: %v %v", pods, err)
	}
}

// TestUserNamespacesHostNetwork runs pods with hostUsers: false and hostNetwork (KEP-5607,
// kubelet's UserNamespacesHostNetworkSupport) on runc, with and without a sandbox
// container: the containers are in the pod's user namespace and the node's network
// namespace, and see the node's /sys, every mount of it read-only (no sysfs can be mounted
// there: runc would fail with EPERM). A handler without user namespaces is refused by name.
func TestUserNamespacesHostNetwork(t *testing.T) {
	e := newContainerEnv(t)
	ctx := ctxT(t)
	// kubelet declares the node feature (NodeDeclaredFeatures) from Status.
	if st, err := e.d.RS.Status(ctx, false); err != nil || !st.GetFeatures().GetUserNamespacesHostNetwork() {
		t.Errorf("Status features %v (%v), want user_namespaces_host_network", st.GetFeatures(), err)
	}
	var nodeNet syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &nodeNet); err != nil {
		t.Fatal(err)
	}
	nodeName, _ := os.Hostname()
	var nodeLinks []string
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ents {
		nodeLinks = append(nodeLinks, d.Name())
	}
	for i, pid := range []runtimeapi.NamespaceMode{runtimeapi.NamespaceMode_CONTAINER, runtimeapi.NamespaceMode_POD} {
		name := "userns-hostnet-" + strings.ToLower(pid.String())
		t.Run(name, func(t *testing.T) {
			e.t = t
			host := uint32(340000 + i*65536)
			pod := podConfig(name, pid)
			pod.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
			pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsOptions(host)
			podID, _ := e.podWith(pod, "runc")
			cfg := e.ctrConfig("app", "sleep", "1000")
			cfg.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
			id := e.run(podID, pod, cfg)
			if out, _ := e.exec(id, "cat", "/proc/self/uid_map"); strings.Join(strings.Fields(out), " ") != fmt.Sprintf("0 %d 65536", host) {
				t.Errorf("uid_map = %q", out)
			}
			if out, _ := e.exec(id, "stat", "-L", "-c", "%i", "/proc/self/ns/net"); out != fmt.Sprint(nodeNet.Ino) {
				t.Errorf("network namespace %s, the node's is %d", out, nodeNet.Ino)
			}
			if out, _ := e.exec(id, "hostname"); out != nodeName {
				t.Errorf("hostname = %q, want the node's %q", out, nodeName)
			}
			if out, _ := e.exec(id, "ls", "/sys/class/net"); strings.Join(strings.Fields(out), " ") != strings.Join(nodeLinks, " ") {
				t.Errorf("/sys/class/net = %q, want the node's links %q", out, nodeLinks)
			}
			// /sys and every kernel filesystem below it read-only, the node's submounts too
			// (rro). The tmpfs runc lays at /sys/fs/cgroup on cgroup v1 is its own, and rw
			// in every container.
			mounts, _ := e.exec(id, "cat", "/proc/self/mounts")
			var kernel []string
			for _, l := range strings.Split(mounts, "\n") {
				f := strings.Fields(l)
				if len(f) < 4 || (f[1] != "/sys" && !strings.HasPrefix(f[1], "/sys/")) || f[2] == "tmpfs" {
					continue
				}
				kernel = append(kernel, f[2]+" "+f[1])
				if !slices.Contains(strings.Split(f[3], ","), "ro") {
					t.Errorf("%s %s is mounted %s in the container, want ro", f[2], f[1], f[3])
				}
			}
			if !slices.Contains(kernel, "sysfs /sys") || len(kernel) < 2 {
				t.Errorf("kernel filesystems at and below /sys: %q, want the node's sysfs and more", kernel)
			}
			// lo's MTU written with the value it has: refused, and harmless if it were not.
			if out, _ := e.exec(id, "sh", "-c", "m=$(cat /sys/class/net/lo/mtu) && { echo $m > /sys/class/net/lo/mtu && echo written || echo refused; }"); out != "refused" {
				t.Errorf("a write to the node's /sys: %q", out)
			}
			e.removePod(podID)
		})
	}
	e.t = t
	pod := podConfig("userns-hostnet-runsc", runtimeapi.NamespaceMode_CONTAINER)
	pod.Linux.SecurityContext.NamespaceOptions.Network = runtimeapi.NamespaceMode_NODE
	pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsOptions(340000)
	if _, err := e.d.RS.RunPodSandbox(ctx, pod, "runsc"); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "feature user_namespaces") {
		t.Errorf("runsc: RunPodSandbox = %v, want FailedPrecondition naming user_namespaces", err)
	}
	if pods, err := e.d.RS.ListPodSandbox(ctx, nil); err != nil || len(pods) != 0 {
		t.Errorf("pods left: %v %v", pods, err)
	}
}

func grepLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// procMount: Unmasked as kubelet sends it: empty masked and read-only lists, which reach
// the daemon through gRPC as none at all. In a pod with a user namespace (Unmasked needs
// hostUsers: false) nothing is masked; kubelet's Default lists still mask; and a pod
// without a user namespace whose client sends no lists gets the defaults.
func TestProcMountUnmasked(t *testing.T) {
	e := newContainerEnv(t)
	masks := func(id string) string {
		t.Helper()
		out, _ := e.exec(id, "sh", "-c", "grep -c -e ' /proc/keys ' -e ' /proc/sys proc ro' /proc/mounts || true")
		return out
	}
	pod := podConfig("unmasked", runtimeapi.NamespaceMode_POD)
	pod.Linux.SecurityContext.NamespaceOptions.UsernsOptions = usernsOptions(330000)
	podID, err := e.d.RS.RunPodSandbox(ctxT(t), pod, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	unmasked := e.ctrConfig("unmasked", "sleep", "1000")
	unmasked.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
	unmasked.Linux.SecurityContext.MaskedPaths, unmasked.Linux.SecurityContext.ReadonlyPaths = []string{}, []string{}
	if got := masks(e.run(podID, pod, unmasked)); got != "0" {
		t.Errorf("procMount Unmasked in a user namespace: %s masks over /proc, want none", got)
	}
	def := e.ctrConfig("default", "sleep", "1000")
	def.Linux.SecurityContext.NamespaceOptions = pod.Linux.SecurityContext.NamespaceOptions
	def.Linux.SecurityContext.MaskedPaths, def.Linux.SecurityContext.ReadonlyPaths = []string{"/proc/keys"}, []string{"/proc/sys"}
	if got := masks(e.run(podID, pod, def)); got != "2" {
		t.Errorf("kubelet's Default lists in a user namespace: %s of /proc/keys and /proc/sys masked, want 2", got)
	}

	plain := podConfig("no-lists", runtimeapi.NamespaceMode_POD)
	plainID, err := e.d.RS.RunPodSandbox(ctxT(t), plain, "runc")
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	none := e.ctrConfig("none", "sleep", "1000")
	none.Linux.SecurityContext.MaskedPaths, none.Linux.SecurityContext.ReadonlyPaths = []string{}, []string{}
	if got := masks(e.run(plainID, plain, none)); got != "2" {
		t.Errorf("no lists without a user namespace: %s of /proc/keys and /proc/sys masked, want the defaults (2)", got)
	}
}
