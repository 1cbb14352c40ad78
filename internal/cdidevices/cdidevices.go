// Package cdidevices applies the Container Device Interface (CDI): the devices a container
// config asks for, in config.CDI_devices and in cdi.k8s.io/ annotations (device plugins and
// DRA drivers use either), are looked up in the vendors' spec files and their edits (device
// nodes, environment, mounts, hooks) applied to the container's OCI spec. It uses
// tags.cncf.io/container-device-interface, the library containerd and CRI-O use, so spec
// files mean here what they mean there.
package cdidevices

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// Request is one device a container asks for, with the config field that names it.
type Request struct {
	Name  string // fully qualified: vendor.com/class=name
	Field string // config.CDI_devices[0], config.annotations["cdi.k8s.io/x"]
}

// Registry resolves CDI devices from the spec files in its directories.
type Registry struct {
	dirs  []string
	cache *cdi.Cache // nil when no directory is configured: every request is refused

	mu     sync.Mutex
	logged map[string]string // spec file -> the error last logged for it
}

// New returns a registry over dirs, lowest priority first (a later directory's spec wins);
// they need not exist yet. Spec files are read now and again before each container that
// asks for a device, so files written later are seen. With no dirs, CDI is off: a container
// that asks for a device is refused.
func New(dirs []string) *Registry {
	r := &Registry{dirs: slices.Clone(dirs), logged: map[string]string{}}
	if len(dirs) == 0 {
		return r
	}
	// Refreshed by hand rather than by the library's directory watch: the watch catches up
	// asynchronously, so a spec written just before CreateContainer could be missed.
	r.cache, _ = cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	r.logSpecErrors()
	return r
}

// Dirs are the spec directories, lowest priority first.
func (r *Registry) Dirs() []string { return slices.Clone(r.dirs) }

// Requested lists the CDI devices cfg asks for: config.CDI_devices first, then the
// cdi.k8s.io/ annotations in key order, each device once (as containerd does). A name that
// is not a qualified CDI device name is refused with ErrInvalidArgument.
func Requested(cfg *runtimeapi.ContainerConfig) ([]Request, error) {
	var out []Request
	seen := map[string]bool{}
	add := func(name, field string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, Request{Name: name, Field: field})
		}
	}
	for i, d := range cfg.GetCDIDevices() {
		field := fmt.Sprintf("config.CDI_devices[%d]", i)
		if d == nil {
			return nil, invalidf("%s is empty", field)
		}
		if _, _, _, err := parser.ParseQualifiedName(d.GetName()); err != nil {
			return nil, invalidf("%s %q is not a qualified CDI device name (vendor.com/class=name): %v", field, d.GetName(), err)
		}
		add(d.GetName(), field)
	}
	ann := cfg.GetAnnotations()
	for _, k := range slices.Sorted(maps.Keys(ann)) {
		if !strings.HasPrefix(k, cdi.AnnotationPrefix) {
			continue
		}
		field := fmt.Sprintf("config.annotations[%q]", k)
		// One key at a time, so that an error names its key.
		_, devs, err := cdi.ParseAnnotations(map[string]string{k: ann[k]})
		if err != nil {
			return nil, invalidf("%s %q: %v", field, ann[k], err)
		}
		for _, d := range devs {
			add(d, field)
		}
	}
	return out, nil
}

// Inject applies to spec the edits of every CDI device cfg asks for; call it once the rest
// of the spec is built, so that the vendor's edits win. A device no spec file defines is
// refused with ErrInvalidArgument naming the field and the device; a defined device whose
// edits cannot be applied (its host device is gone) fails with ErrFailedPrecondition. It
// returns the names of the injected devices.
func (r *Registry) Inject(spec *specs.Spec, cfg *runtimeapi.ContainerConfig) ([]string, error) {
	reqs, err := Requested(cfg)
	if err != nil || len(reqs) == 0 {
		return nil, err
	}
	if r == nil || r.cache == nil {
		return nil, invalidf("%s: no CDI spec directories are configured (cdi.spec_dirs)", describe(reqs))
	}
	// Refresh's error is the spec files that failed to load; those are logged, and a
	// broken file of one vendor must not keep another vendor's devices from a container.
	_ = r.cache.Refresh()
	failed := r.logSpecErrors()
	names := make([]string, len(reqs))
	for i, q := range reqs {
		names[i] = q.Name
	}
	unresolved, err := r.cache.InjectDevices(spec, names...)
	if len(unresolved) > 0 {
		var missing []Request
		for _, q := range reqs {
			if slices.Contains(unresolved, q.Name) {
				missing = append(missing, q)
			}
		}
		msg := fmt.Sprintf("%s: unresolvable CDI devices: no spec file in %s defines them", describe(missing), strings.Join(r.dirs, ", "))
		if len(failed) > 0 {
			msg += fmt.Sprintf(" (spec files that failed to load, see the daemon log: %s)", strings.Join(failed, ", "))
		}
		return nil, invalidf("%s", msg)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", describe(reqs), err, errdefs.ErrFailedPrecondition)
	}
	return names, nil
}

// describe names requests as `field "name"`, comma-separated.
func describe(reqs []Request) string {
	parts := make([]string, len(reqs))
	for i, q := range reqs {
		parts[i] = fmt.Sprintf("%s %q", q.Field, q.Name)
	}
	return strings.Join(parts, ", ")
}

// logSpecErrors warns once about each spec file that fails to load (again when its error
// changes) and returns the failing files, sorted.
func (r *Registry) logSpecErrors() []string {
	errs := r.cache.GetErrors()
	r.mu.Lock()
	defer r.mu.Unlock()
	for path := range r.logged {
		if _, ok := errs[path]; !ok {
			delete(r.logged, path) // loads again: a new failure is news
		}
	}
	files := slices.Sorted(maps.Keys(errs))
	for _, path := range files {
		msg := errors.Join(errs[path]...).Error()
		if r.logged[path] == msg {
			continue
		}
		r.logged[path] = msg
		logrus.WithFields(logrus.Fields{"file": path, "error": msg}).Warn("CDI spec file not loaded; its devices cannot be injected")
	}
	return files
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}
