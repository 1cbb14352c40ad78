package image

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/BurntSushi/toml"
	"github.com/containers/image/v5/pkg/sysregistriesv2"

	"github.com/rtshimd/rtshimd/pkg/store"
)

const systemRegistriesConf = "/etc/containers/registries.conf"

// setupRegistries points the pull context at the configured registries.conf and renders
// the config's own [[image.registries]] as a drop-in on top of it, then loads the result
// once so a mistake stops the daemon at start rather than failing a pull later.
func (s *Service) setupRegistries() error {
	conf := s.opts.Config.RegistriesConf
	if conf == "" {
		if _, err := os.Stat(systemRegistriesConf); err == nil {
			conf = systemRegistriesConf
		}
	}
	dropins := filepath.Join(s.opts.RunRoot, "registries.conf.d")
	if err := os.RemoveAll(dropins); err != nil {
		return err
	}
	if err := os.MkdirAll(dropins, 0o755); err != nil {
		return err
	}
	if conf == "" {
		// containers/image falls back to a built-in path otherwise; give it an empty file.
		conf = filepath.Join(s.opts.RunRoot, "registries.conf")
		if err := store.WriteFileAtomic(conf, nil, 0o644); err != nil {
			return err
		}
	}
	s.sys.SystemRegistriesConfPath = conf
	s.sys.SystemRegistriesConfDirPath = dropins
	if regs := s.opts.Config.Registries; len(regs) > 0 {
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
			return fmt.Errorf("render image.registries: %w", err)
		}
		if err := store.WriteFileAtomic(filepath.Join(dropins, "50-rtshimd.conf"), buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	sysregistriesv2.InvalidateCache()
	if _, err := sysregistriesv2.GetRegistries(&s.sys); err != nil {
		return fmt.Errorf("registry configuration (%s and image.registries): %w", conf, err)
	}
	return nil
}
