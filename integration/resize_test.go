//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// UpdatePodSandboxResources (in-place pod resize) sets the pod cgroup rtshimd made to
// the new limits plus the overhead, up and down; on runsc, whose sandbox container holds
// the pod, that container's cgroup too; the record keeps what was sent and where it went.
func TestUpdatePodSandboxResources(t *testing.T) {
	e := newContainerEnv(t)
	d := e.d
	ctx := ctxT(t)
	const period = 100000
	type limits struct{ mem, quota, shares int64 }
	overhead := map[string]struct{ mem, milli int64 }{"runc": {0, 0}, "runsc": {64 << 20, 100}}
	for _, h := range []string{"runc", "runsc"} {
		t.Run(h, func(t *testing.T) {
			o := overhead[h]
			cfg := podConfig("resize-"+h, runtimeapi.NamespaceMode_CONTAINER)
			cfg.LogDirectory = filepath.Join(e.logs, "resize-"+h)
			cfg.Linux.Resources = &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: 128 << 20, CpuQuota: 50000, CpuPeriod: period, CpuShares: 512}
			cgroup := cfg.Linux.CgroupParent
			id, err := d.RS.RunPodSandbox(ctx, cfg, h)
			if err != nil {
				t.Fatal(err)
			}
			ctr := e.run(id, cfg, e.ctrConfig("c", "sleep", "1000"))
			st, err := d.RS.PodSandboxStatus(ctx, id, true)
			if err != nil {
				t.Fatal(err)
			}
			cgroups := []string{cgroup}
			if h == "runsc" {
				info := decodeInfo(t, st.Info).Metadata
				cgroups = append(cgroups, info.CgroupsPath)
				// The sandbox container's spec carries the pod's size as kubelet sent it
				// (without the overhead), under containerd's names, as Kata reads them.
				bundle := info.BundleDir
				if bundle == "" {
					bundle = filepath.Join(info.Dir, "infra")
				}
				var spec struct {
					Annotations map[string]string `json:"annotations"`
				}
				b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
				if err == nil {
					err = json.Unmarshal(b, &spec)
				}
				if err != nil {
					t.Fatal(err)
				}
				for k, want := range map[string]string{"io.kubernetes.cri.sandbox-memory": "134217728", "io.kubernetes.cri.sandbox-cpu-quota": "50000",
					"io.kubernetes.cri.sandbox-cpu-period": "100000", "io.kubernetes.cri.sandbox-cpu-shares": "512"} {
					if spec.Annotations[k] != want {
						t.Errorf("sandbox container's annotation %s = %q, want %q", k, spec.Annotations[k], want)
					}
				}
			}
			want := func(l limits) limits {
				return limits{l.mem + o.mem, l.quota + o.milli*period/1000, l.shares + o.milli*1024/1000}
			}
			check := func(when string, l limits) {
				t.Helper()
				w := want(l)
				for _, cg := range cgroups {
					mem, quota := readCgroupInt(t, "memory", cg, "memory.limit_in_bytes"), readCgroupInt(t, "cpu", cg, "cpu.cfs_quota_us")
					shares, ok := cpuSharesAre(t, cg, w.shares)
					if mem != w.mem || quota != w.quota || !ok {
						t.Errorf("%s: cgroup %s has memory %d, quota %d, shares %s; want %+v", when, cg, mem, quota, shares, w)
					}
				}
			}
			check("created", limits{128 << 20, 50000, 512})

			resize := func(l limits) error {
				_, err := d.RS.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{
					PodSandboxId: id,
					Resources:    &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: l.mem, CpuQuota: l.quota, CpuPeriod: period, CpuShares: l.shares},
				})
				return err
			}
			up := limits{256 << 20, 100000, 1024}
			if err := resize(up); err != nil {
				t.Fatalf("grow: %v", err)
			}
			check("grown", up)
			// Down again, below where it started: a pod cgroup rtshimd made is its own to lower.
			down := limits{96 << 20, 30000, 256}
			if err := resize(down); err != nil {
				t.Fatalf("shrink: %v", err)
			}
			check("shrunk", down)
			if out, _ := e.exec(ctr, "echo", "ok"); out != "ok" {
				t.Errorf("exec in the resized pod: %q", out)
			}

			st, err = d.RS.PodSandboxStatus(ctx, id, true)
			if err != nil {
				t.Fatal(err)
			}
			var info struct {
				Status struct {
					Resize struct {
						Resources struct {
							MemoryLimitInBytes string `json:"memoryLimitInBytes"`
						} `json:"resources"`
						Applied struct {
							PodCgroup        string `json:"pod_cgroup"`
							SandboxContainer bool   `json:"sandbox_container"`
							Limits           struct {
								Memory struct {
									Limit int64 `json:"limit"`
								} `json:"memory"`
							} `json:"limits"`
						} `json:"applied"`
						NotApplied string `json:"not_applied"`
					} `json:"resize"`
				} `json:"status"`
			}
			if err := json.Unmarshal([]byte(st.Info["info"]), &info); err != nil {
				t.Fatal(err)
			}
			r := info.Status.Resize
			if r.Resources.MemoryLimitInBytes != "100663296" || r.Applied.PodCgroup != cgroup || r.Applied.Limits.Memory.Limit != want(down).mem ||
				r.Applied.SandboxContainer != (h == "runsc") || r.NotApplied != "" {
				t.Errorf("verbose status.resize = %+v", r)
			}

			if err := d.RS.RemovePodSandbox(ctx, id); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", cgroup)); err == nil {
				t.Errorf("the pod cgroup rtshimd made outlived the pod")
			}
		})
	}

	t.Run("bad input", func(t *testing.T) {
		_, err := d.RS.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: "0123456789abcdef"})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("unknown pod: %v", err)
		}
		_, err = d.RS.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "pod_sandbox_id") {
			t.Errorf("no pod id: %v", err)
		}
	})
}
