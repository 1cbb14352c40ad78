// Package lsm turns a pod's or container's AppArmor and SELinux requests into the runtime
// spec's fields, for what the node's Linux security modules can do: a request the node
// cannot honour is refused by name, never dropped.
package lsm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/moby/profiles/apparmor"
	"github.com/opencontainers/selinux/go-selinux"
	"github.com/opencontainers/selinux/go-selinux/label"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// DefaultAppArmorProfile is the profile RuntimeDefault gets where AppArmor is enabled:
// the template moby and containerd load, under rtshimd's name.
const DefaultAppArmorProfile = "rtshimd-default"

// Host is what the node's security modules can do. The zero value has neither.
type Host struct {
	// AppArmor: the module is enabled and apparmor_parser is there to load profiles.
	AppArmor bool
	// SELinux: the module is enabled (a policy is loaded).
	SELinux bool
	// StrictSELinux: where SELinux is not enabled, refuse a request for labels instead of
	// running it without them (config strict_selinux).
	StrictSELinux bool
}

var (
	detectOnce sync.Once
	detected   Host
)

// Detect reads what this node has (once) and says at start what it means for pods.
func Detect() Host {
	detectOnce.Do(func() {
		b, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled")
		_, parserErr := exec.LookPath("apparmor_parser")
		detected.AppArmor = strings.TrimSpace(string(b)) == "Y" && parserErr == nil
		detected.SELinux = selinux.GetEnabled()
		log := logrus.WithFields(logrus.Fields{"apparmor": detected.AppArmor, "selinux": detected.SELinux})
		if !detected.AppArmor {
			log.Info("AppArmor is not enabled on this node: RuntimeDefault runs unconfined, Localhost profiles are refused")
		}
		if !detected.SELinux {
			log.Info("SELinux is not enabled on this node: SELinux labels asked for are not applied (refused with strict_selinux)")
		}
	})
	return detected
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// AppArmorProfile returns the AppArmor profile for a request ("" = none): field names it
// in errors (config.linux.security_context), sp is its apparmor field and deprecated its
// apparmor_profile string. Nothing asked means RuntimeDefault, as in containerd and
// CRI-O; a privileged container is not confined (the CRI says so).
func (h Host) AppArmorProfile(field string, sp *runtimeapi.SecurityProfile, deprecated string, privileged bool) (string, error) {
	kind, name, f, err := appArmorRequest(field, sp, deprecated)
	if err != nil {
		return "", err
	}
	if privileged || kind == runtimeapi.SecurityProfile_Unconfined {
		return "", nil
	}
	if !h.AppArmor {
		if kind == runtimeapi.SecurityProfile_Localhost {
			return "", invalidf("%s %q: AppArmor is not enabled on this node (/sys/module/apparmor/parameters/enabled), so the profile cannot be applied; run the pod on a node with AppArmor or drop the profile", f, name)
		}
		logrus.WithField("field", f).Debug("RuntimeDefault AppArmor profile: AppArmor is not enabled on this node; running unconfined")
		return "", nil
	}
	if kind == runtimeapi.SecurityProfile_Localhost {
		loaded, err := apparmor.IsLoaded(name)
		if err != nil {
			return "", fmt.Errorf("%s %q: read the loaded AppArmor profiles: %w", f, name, err)
		}
		if !loaded {
			return "", invalidf("%s %q: no AppArmor profile of that name is loaded on this node", f, name)
		}
		return name, nil
	}
	if err := installDefault(); err != nil {
		return "", fmt.Errorf("%s RuntimeDefault: load AppArmor profile %s: %w", f, DefaultAppArmorProfile, err)
	}
	return DefaultAppArmorProfile, nil
}

var defaultMu sync.Mutex

// installDefault loads the default profile unless it is loaded (a restart keeps it).
func installDefault() error {
	defaultMu.Lock()
	defer defaultMu.Unlock()
	if ok, err := apparmor.IsLoaded(DefaultAppArmorProfile); err == nil && ok {
		return nil
	}
	return apparmor.InstallDefault(DefaultAppArmorProfile)
}

// appArmorRequest reads the apparmor field, or the deprecated string when the field is
// absent, and returns the kind, the profile name and the field it came from.
func appArmorRequest(field string, sp *runtimeapi.SecurityProfile, deprecated string) (runtimeapi.SecurityProfile_ProfileType, string, string, error) {
	if sp != nil {
		f := field + ".apparmor"
		switch sp.GetProfileType() {
		case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
			return sp.GetProfileType(), "", f, nil
		case runtimeapi.SecurityProfile_Localhost:
			name := sp.GetLocalhostRef()
			if name == "" {
				return 0, "", f, invalidf("%s.localhost_ref is empty with profile_type Localhost", f)
			}
			return runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(name, "localhost/"), f + ".localhost_ref", nil
		default:
			return 0, "", f, invalidf("%s.profile_type %d is not RuntimeDefault, Unconfined or Localhost", f, sp.GetProfileType())
		}
	}
	f := field + ".apparmor_profile"
	switch {
	case deprecated == "" || deprecated == "runtime/default":
		return runtimeapi.SecurityProfile_RuntimeDefault, "", f, nil
	case deprecated == "unconfined":
		return runtimeapi.SecurityProfile_Unconfined, "", f, nil
	case strings.HasPrefix(deprecated, "localhost/") && len(deprecated) > len("localhost/"):
		return runtimeapi.SecurityProfile_Localhost, strings.TrimPrefix(deprecated, "localhost/"), f, nil
	}
	return 0, "", f, invalidf("%s %q is not runtime/default, unconfined or localhost/<profile>", f, deprecated)
}

// SELinuxLabels returns the process and mount labels for a request's selinux_options
// (field names it). Where SELinux is enabled every container gets labels (a fresh MCS
// level unless the request sets one), as containerd's and CRI-O's. Where it is not, there
// are no labels: a request that sets any part of one runs without it and a warning names
// the field and the label (kubelet passes a pod's seLinuxOptions to every node, and
// containerd and CRI-O run such pods), or, with StrictSELinux, is refused.
func (h Host) SELinuxLabels(field string, o *runtimeapi.SELinuxOption, privileged bool) (process, mount string, err error) {
	f := field + ".selinux_options"
	var opts []string
	for _, p := range []struct{ key, val string }{{"user", o.GetUser()}, {"role", o.GetRole()}, {"type", o.GetType()}, {"level", o.GetLevel()}} {
		if p.val != "" {
			opts = append(opts, p.key+":"+p.val)
		}
	}
	if !h.SELinux {
		if len(opts) == 0 {
			return "", "", nil
		}
		if h.StrictSELinux {
			return "", "", invalidf("%s %q: SELinux is not enabled on this node, so the label cannot be applied (strict_selinux); run the pod on an SELinux node or drop selinuxOptions", f, strings.Join(opts, ","))
		}
		logrus.WithFields(logrus.Fields{"field": f, "label": strings.Join(opts, ",")}).
			Warn("SELinux is not enabled on this node: running without the SELinux label asked for")
		return "", "", nil
	}
	if privileged {
		opts = append(opts, "disable")
	}
	process, mount, err = label.InitLabels(opts)
	if err != nil {
		return "", "", invalidf("%s %q: %s", f, strings.Join(opts, ","), errText(err))
	}
	return process, mount, nil
}

// relabel is label.Relabel; tests replace it, as no node here has SELinux.
var relabel = label.Relabel

// CheckRelabel says whether a mount's selinux_relabel (field names it, what is its host
// path or image) is carried out. Where SELinux is enabled it is. Where it is not, there is
// no label to give the files: the mount is made without one and a warning names the field,
// as containerd and CRI-O run it (critest asks for it on every node; kubelet only on SELinux
// nodes), or, with StrictSELinux, the request is refused by name.
func (h Host) CheckRelabel(field, what string) (bool, error) {
	if h.SELinux {
		return true, nil
	}
	if h.StrictSELinux {
		return false, invalidf("%s is set for %s: SELinux is not enabled on this node, so the volume cannot be relabeled (strict_selinux); run the pod on an SELinux node or unset selinux_relabel", field, what)
	}
	logrus.WithFields(logrus.Fields{"field": field, "mount": what}).
		Warn("SELinux is not enabled on this node: mounting without relabeling")
	return false, nil
}

// Relabel gives path (a mount's host path, symlinks resolved) and everything under it the
// container's mount label, private to the container (its MCS level kept), as containerd
// and CRI-O do for selinux_relabel; without SELinux it is CheckRelabel. go-selinux refuses
// system directories (/, /usr, /etc, ...). A file system that cannot hold labels is left
// as it is, as containerd does.
func (h Host) Relabel(field, path, mountLabel string) error {
	if ok, err := h.CheckRelabel(field, fmt.Sprintf("host path %q", path)); !ok {
		return err
	}
	if err := relabel(path, mountLabel, false); err != nil {
		if errors.Is(err, syscall.ENOTSUP) {
			logrus.WithFields(logrus.Fields{"field": field, "path": path}).Warn("selinux_relabel: the file system does not support SELinux labels; left as it is")
			return nil
		}
		return fmt.Errorf("%s: relabel host path %q with %q: %w", field, path, mountLabel, err)
	}
	return nil
}

func errText(err error) string {
	for u := errors.Unwrap(err); u != nil; u = errors.Unwrap(err) {
		err = u
	}
	return err.Error()
}
