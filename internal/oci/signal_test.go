package oci

import (
	"errors"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
)

// ContainerConfig.stop_signal (KEP-4960) to the name runtimes' kill take, and back to
// the enum ContainerStatus.stop_signal reports.
func TestCRIStopSignal(t *testing.T) {
	for sig, want := range map[runtimeapi.Signal]string{
		runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT: "",
		runtimeapi.Signal_SIGNAL_SIGQUIT:         "SIGQUIT",
		runtimeapi.Signal_SIGNAL_SIGIOT:          "SIGABRT",
		runtimeapi.Signal_SIGNAL_SIGPOLL:         "SIGIO",
		runtimeapi.Signal_SIGNAL_SIGCLD:          "SIGCHLD",
		runtimeapi.Signal_SIGNAL_SIGRTMIN:        "34",
		runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3:   "37",
		runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS1:  "63",
		runtimeapi.Signal_SIGNAL_SIGRTMAX:        "64",
	} {
		got, err := CRIStopSignal(sig)
		if err != nil || got != want {
			t.Errorf("CRIStopSignal(%v) = %q, %v, want %q", sig, got, err, want)
		}
	}
	// Every signal of the enum names one a runtime takes, and comes back as itself (or,
	// for an alias, as the name the kernel gives it).
	aliases := map[runtimeapi.Signal]runtimeapi.Signal{
		runtimeapi.Signal_SIGNAL_SIGIOT:  runtimeapi.Signal_SIGNAL_SIGABRT,
		runtimeapi.Signal_SIGNAL_SIGPOLL: runtimeapi.Signal_SIGNAL_SIGIO,
		runtimeapi.Signal_SIGNAL_SIGCLD:  runtimeapi.Signal_SIGNAL_SIGCHLD,
	}
	for v := range runtimeapi.Signal_name {
		sig := runtimeapi.Signal(v)
		if sig == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
			continue
		}
		name, err := CRIStopSignal(sig)
		if err != nil {
			t.Errorf("%v: %v", sig, err)
			continue
		}
		want := sig
		if a, ok := aliases[sig]; ok {
			want = a
		}
		if got := CRISignal(name); got != want {
			t.Errorf("%v → %q → %v", sig, name, got)
		}
	}
	_, err := CRIStopSignal(runtimeapi.Signal(99))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "stop_signal") || !strings.Contains(err.Error(), "99") {
		t.Errorf("unknown enum value: %v, want InvalidArgument naming stop_signal and 99", err)
	}
	if got := CRISignal("SIGTERM"); got != runtimeapi.Signal_SIGNAL_SIGTERM {
		t.Errorf("CRISignal(SIGTERM) = %v", got)
	}
}
