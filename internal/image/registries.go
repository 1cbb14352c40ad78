package image

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/BurntSushi/toml"
	"github.com/containers/image/v5/pkg/sysregistriesv2"
	"github.com/containers/image/v5/types"

	"github.com/rtshimd/rtshimd/internal/config"
	"github.com/rtshimd/rtshimd/internal/store"
)

const systemRegistriesConf = "/etc/containers/registries.conf"

// setupRegistries points the pull context at the configured registries.conf and renders
// the config's own [[image.registries]] as a drop-in on top of it, then loads the result
// once so a mistake stops the daemon at start rather than failing a pull later.
func (s *Service) setupRegistries() error {
	old, _ := filepath.Glob(filepath.Join(s.opts.RunRoot, "registries.conf.d*"))
	for _, d := range old {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return s.SetRegistries(s.opts.Config)
}

// SetRegistries renders cfg's registries into a drop-in directory of their own and
// loads the result; only if that succeeds do later pulls use it (a reload). Pulls under
// way keep what they started with.
func (s *Service) SetRegistries(cfg config.Image) error {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	s.regGen++
	sig, err := newSigConfig(cfg)
	if err != nil {
		return err
	}
	sys, err := renderRegistries(cfg, s.opts.RunRoot, filepath.Join(s.opts.RunRoot, fmt.Sprintf("registries.conf.d-%d", s.regGen)))
	if err != nil {
		return err
	}
	s.sysMu.Lock()
	prev := s.sys.SystemRegistriesConfDirPath
	s.sys.SystemRegistriesConfPath = sys.SystemRegistriesConfPath
	s.sys.SystemRegistriesConfDirPath = sys.SystemRegistriesConfDirPath
	s.sys.RegistriesDirPath = cfg.RegistriesD // "" is containers/image's default
	s.sig = sig
	remove := prev != "" && s.dirUsers[prev] == 0
	if prev != "" && !remove {
		if s.retired == nil {
			s.retired = map[string]bool{}
		}
		s.retired[prev] = true // removed by its last pull's release
	}
	s.sysMu.Unlock()
	if remove {
		_ = os.RemoveAll(prev)
	}
	return nil
}

// pullContext is the pull context of now, without per-request auth, and the release the
// pull calls when it is done: containers/image reads the drop-in directory lazily (when it
// resolves a registry), so a reload must not remove the directory from under a pull under
// way, which would then run without its blocked and mirror settings.
func (s *Service) pullContext() (types.SystemContext, sigConfig, func()) {
	s.sysMu.Lock()
	defer s.sysMu.Unlock()
	sys, sig := s.sys, s.sig
	dir := sys.SystemRegistriesConfDirPath
	if s.dirUsers == nil {
		s.dirUsers = map[string]int{}
	}
	s.dirUsers[dir]++
	var once sync.Once
	return sys, sig, func() {
		once.Do(func() {
			s.sysMu.Lock()
			s.dirUsers[dir]--
			last := s.dirUsers[dir] == 0
			if last {
				delete(s.dirUsers, dir)
			}
			remove := last && s.retired[dir]
			if remove {
				delete(s.retired, dir)
			}
			s.sysMu.Unlock()
			if remove {
				_ = os.RemoveAll(dir)
			}
		})
	}
}

// renderRegistries writes the drop-in for cfg into dropins and validates the whole.
func renderRegistries(cfg config.Image, runRoot, dropins string) (sys types.SystemContext, err error) {
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dropins)
		}
	}()
	conf := cfg.RegistriesConf
	if conf == "" {
		if _, err := os.Stat(systemRegistriesConf); err == nil {
			conf = systemRegistriesConf
		}
	}
	// Read by the daemon alone (containers/image, in its pulls): no other user needs it.
	if err := os.MkdirAll(dropins, 0o700); err != nil {
		return sys, err
	}
	if conf == "" {
		// containers/image falls back to a built-in path otherwise; give it an empty file.
		conf = filepath.Join(runRoot, "registries.conf")
		if err := store.WriteFileAtomic(conf, nil, 0o644); err != nil {
			return sys, err
		}
	}
	sys.SystemRegistriesConfPath = conf
	sys.SystemRegistriesConfDirPath = dropins
	if regs := cfg.Registries; len(regs) > 0 {
		type mirror struct {
			Location string `toml:"location"`
			Insecure bool   `toml:"insecure"`
		}
		type entry struct {
			Prefix   string   `toml:"prefix,omitempty"`
			Location string   `toml:"location"`
			Insecure bool     `toml:"insecure"`
			Blocked  bool     `toml:"blocked"`
			Mirror   []mirror `toml:"mirror,omitempty"`
		}
		var file struct {
			Registry []entry `toml:"registry"`
		}
		for _, r := range regs {
			e := entry{Prefix: r.Prefix, Location: r.Location, Insecure: r.Insecure, Blocked: r.Blocked}
			if e.Location == "" {
				e.Location = e.Prefix
			}
			for _, m := range r.Mirrors {
				e.Mirror = append(e.Mirror, mirror{Location: m.Location, Insecure: m.Insecure})
			}
			file.Registry = append(file.Registry, e)
		}
		var buf bytes.Buffer
		if err := toml.NewEncoder(&buf).Encode(file); err != nil {
			return sys, fmt.Errorf("render image.registries: %w", err)
		}
		if err := store.WriteFileAtomic(filepath.Join(dropins, "50-rtshimd.conf"), buf.Bytes(), 0o600); err != nil {
			return sys, err
		}
	}
	sysregistriesv2.InvalidateCache()
	if _, err := sysregistriesv2.GetRegistries(&sys); err != nil {
		return sys, fmt.Errorf("registry configuration (%s and image.registries): %w", conf, err)
	}
	return sys, nil
}
