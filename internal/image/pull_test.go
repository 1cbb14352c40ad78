package image

import (
	"errors"
	"strings"
	"testing"

	dockerref "github.com/containers/image/v5/docker/reference"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

func TestPullErrorKinds(t *testing.T) {
	named, _ := dockerref.ParseNormalizedNamed("127.0.0.1:40131/multi/arch:x")
	cases := []struct {
		msg  string
		kind error
		why  string
	}{
		// The port holds "401": still a platform error, not an auth one.
		{`choosing an image from manifest list docker://127.0.0.1:40131/multi/arch:x: no image found in image index for architecture "amd64"`, errdefs.ErrNotFound, "platform"},
		{"reading manifest x in 127.0.0.1:40131/multi/arch: unauthorized: authentication required", errdefs.ErrFailedPrecondition, "unauthorized"},
		{"reading manifest x in 127.0.0.1:40404/multi/arch: manifest unknown", errdefs.ErrNotFound, "not found"},
		{"pinging container registry 127.0.0.1:40131: dial tcp: connection refused", errdefs.ErrUnavailable, "unreachable"},
	}
	for _, tc := range cases {
		err := pullError(named, errors.New(tc.msg))
		if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), "registry 127.0.0.1:40131") {
			t.Errorf("%q became %v", tc.msg, err)
		}
	}
}
