package image

import (
	"os"
	"testing"

	"github.com/containers/image/v5/pkg/sysregistriesv2"

	"github.com/rtshimd/rtshimd/internal/config"
)

// A reload does not remove the registries drop-in from under a pull that started before
// it: the pull still finds the registry blocked (containers/image reads the drop-ins when
// it resolves the registry, after the pull began); the old drop-in goes with its last pull.
func TestReloadKeepsDropinOfPullUnderWay(t *testing.T) {
	s := &Service{opts: Options{RunRoot: t.TempDir(), Config: config.Image{RegistriesConf: "/dev/null"}}}
	blocked := config.Image{RegistriesConf: "/dev/null", Registries: []config.Registry{{Prefix: "blocked.test", Location: "blocked.test", Blocked: true}}}
	if err := s.SetRegistries(blocked); err != nil {
		t.Fatal(err)
	}
	sys, _, release := s.pullContext()
	if err := s.SetRegistries(config.Image{RegistriesConf: "/dev/null"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sys.SystemRegistriesConfDirPath); err != nil {
		t.Fatalf("the drop-in of a pull under way was removed by the reload: %v", err)
	}
	sysregistriesv2.InvalidateCache()
	reg, err := sysregistriesv2.FindRegistry(&sys, "blocked.test/img:1")
	if err != nil || reg == nil || !reg.Blocked {
		t.Errorf("the pull under way resolves blocked.test as %+v (%v), want blocked", reg, err)
	}
	release()
	release() // a second call does nothing
	if _, err := os.Stat(sys.SystemRegistriesConfDirPath); !os.IsNotExist(err) {
		t.Errorf("the replaced drop-in outlived its last pull: %v", err)
	}
	now, _, releaseNow := s.pullContext()
	defer releaseNow()
	if _, err := os.Stat(now.SystemRegistriesConfDirPath); err != nil {
		t.Errorf("the current drop-in: %v", err)
	}
}
