package oci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

const testPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1::/:/sbin/nologin
# a comment
+nis
broken line
alice:x:1000:1000::/home/alice:/bin/sh
bob:x:1001:100::/home/bob:/bin/sh
`

const testGroup = `root:x:0:
users:x:100:
alice:x:1000:
wheel:x:10:alice,root
audio:x:29:alice, bob
staff:x:50:
video:x:44:bob
`

// testRootfs is a root filesystem holding only /etc/passwd and /etc/group.
func testRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"passwd": testPasswd, "group": testGroup} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func i64(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }

func TestResolveUser(t *testing.T) {
	root := testRootfs(t)
	tests := []struct {
		name      string
		sc        *runtimeapi.LinuxContainerSecurityContext
		imageUser string
		want      specs.User
	}{
		{"default is root, with root's groups", nil, "", specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 10}}},
		{"image user name", nil, "alice", specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{10, 29, 1000}}},
		{"image uid listed in passwd", nil, "1001", specs.User{UID: 1001, GID: 100, AdditionalGids: []uint32{29, 44, 100}}},
		{"image uid not in passwd", nil, "4242", specs.User{UID: 4242, GID: 0, AdditionalGids: []uint32{0}}},
		{"image uid:gid", nil, "1000:50", specs.User{UID: 1000, GID: 50, AdditionalGids: []uint32{10, 29, 50}}},
		{"image name:group", nil, "alice:staff", specs.User{UID: 1000, GID: 50, AdditionalGids: []uint32{10, 29, 50}}},
		{"image uid:group", nil, "1001:staff", specs.User{UID: 1001, GID: 50, AdditionalGids: []uint32{29, 44, 50}}},
		{"run_as_user wins over the image", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000)}, "bob:staff",
			specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{10, 29, 1000}}},
		{"run_as_user not in passwd", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(5000)}, "alice",
			specs.User{UID: 5000, GID: 0, AdditionalGids: []uint32{0}}},
		{"run_as_username wins over run_as_user", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsUsername: "bob"}, "",
			specs.User{UID: 1001, GID: 100, AdditionalGids: []uint32{29, 44, 100}}},
		{"run_as_group replaces the primary group", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), RunAsGroup: i64(7)}, "",
			specs.User{UID: 1000, GID: 7, AdditionalGids: []uint32{7, 10, 29}}},
		{"supplemental groups merged", &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1000), SupplementalGroups: []int64{5, 10}}, "",
			specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{5, 10, 29, 1000}}},
		{"strict policy skips /etc/group", &runtimeapi.LinuxContainerSecurityContext{
			RunAsUser: i64(1000), SupplementalGroups: []int64{5}, SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict}, "",
			specs.User{UID: 1000, GID: 1000, AdditionalGids: []uint32{5, 1000}}},
		{"strict policy with a named image user", &runtimeapi.LinuxContainerSecurityContext{
			SupplementalGroupsPolicy: runtimeapi.SupplementalGroupsPolicy_Strict}, "bob",
			specs.User{UID: 1001, GID: 100, AdditionalGids: []uint32{100}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveUser(root, tt.sc, tt.imageUser)
			if err != nil {
				t.Fatalf("ResolveUser: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ResolveUser = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestResolveUserErrors(t *testing.T) {
	root := testRootfs(t)
	tests := []struct {
		name      string
		rootfs    string
		sc        *runtimeapi.LinuxContainerSecurityContext
		imageUser string
		want      string
	}{
		{"image user missing", root, nil, "carol", `image USER "carol": no user "carol" in the image's /etc/passwd`},
		{"run_as_username missing", root, &runtimeapi.LinuxContainerSecurityContext{RunAsUsername: "carol"}, "alice",
			`config.linux.security_context.run_as_username "carol": no user "carol"`},
		{"image group missing", root, nil, "bob:nogroup", `image USER "bob:nogroup": no group "nogroup" in the image's /etc/group`},
		{"named user without /etc/passwd", t.TempDir(), nil, "alice", `no user "alice"`},
		{"negative run_as_user", root, &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(-1)}, "", `config.linux.security_context.run_as_user -1 is not a valid uid`},
		{"run_as_group without a user", root, &runtimeapi.LinuxContainerSecurityContext{RunAsGroup: i64(7)}, "alice:staff", `run_as_group 7 is set without run_as_user`},
		{"negative run_as_group", root, &runtimeapi.LinuxContainerSecurityContext{RunAsUser: i64(1), RunAsGroup: i64(-2)}, "", `run_as_group -2 is not a valid gid`},
		{"negative supplemental group", root, &runtimeapi.LinuxContainerSecurityContext{SupplementalGroups: []int64{1, -3}}, "", `supplemental_groups[1] -3 is not a valid gid`},
		{"unknown policy", root, &runtimeapi.LinuxContainerSecurityContext{SupplementalGroupsPolicy: 7}, "", `supplemental_groups_policy 7 is not Merge or Strict`},
		{"empty user part", root, nil, ":50", `image USER ":50" is not user`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ResolveUser(tt.rootfs, tt.sc, tt.imageUser)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v does not wrap ErrInvalidArgument", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestResolveUserNumericWithoutFiles(t *testing.T) {
	got, err := ResolveUser(t.TempDir(), nil, "123:456")
	if err != nil {
		t.Fatal(err)
	}
	want := specs.User{UID: 123, GID: 456, AdditionalGids: []uint32{456}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// A rootfs whose /etc/passwd is an absolute symlink must not read the host's file.
func TestResolveUserStaysInRootfs(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(outside, []byte("evil:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "etc", "passwd")); err != nil {
		t.Fatal(err)
	}
	if u, err := ResolveUser(root, nil, "evil"); err == nil {
		t.Fatalf("resolved %+v through a symlink out of the rootfs", u)
	}
	// The same file inside the rootfs resolves: the failure above is the symlink's.
	if err := os.Remove(filepath.Join(root, "etc", "passwd")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("evil:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveUser(root, nil, "evil"); err != nil {
		t.Fatalf("in-rootfs passwd: %v", err)
	}
}

func TestStopSignal(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "SIGTERM"},
		{"SIGQUIT", "SIGQUIT"},
		{"QUIT", "SIGQUIT"},
		{"sigquit", "SIGQUIT"},
		{"3", "SIGQUIT"},
		{"9", "SIGKILL"},
		{"SIGUSR1", "SIGUSR1"},
		{"SIGIOT", "SIGABRT"},
		{" SIGINT ", "SIGINT"},
		{"SIGRTMIN", "34"},
		{"SIGRTMIN+3", "37"},
		{"RTMAX-1", "63"},
		{"SIGRTMAX", "64"},
		{"40", "40"},
	}
	for _, tt := range tests {
		got, err := StopSignal(tt.in)
		if err != nil {
			t.Errorf("StopSignal(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("StopSignal(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, bad := range []string{"SIGBOGUS", "0", "65", "-1", "SIGRTMIN-1", "RTMIN+31", "RTMAX+1", "SIG", "3x"} {
		got, err := StopSignal(bad)
		if err == nil {
			t.Errorf("StopSignal(%q) = %q, want an error", bad, got)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `STOPSIGNAL "`+bad+`"`) {
			t.Errorf("StopSignal(%q) error = %v", bad, err)
		}
	}
}
