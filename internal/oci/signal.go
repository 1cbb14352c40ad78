package oci

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Real-time signals as glibc numbers them (the kernel's 32 and 33 are taken by threading),
// which is what Docker's "RTMIN+n" means.
const (
	sigRTMin = 34
	sigRTMax = 64
)

// StopSignal is the image's STOPSIGNAL ("SIGQUIT", "QUIT", "3") as a name runc/runsc `kill`
// accept ("SIGQUIT"), default "SIGTERM". Real-time signals ("SIGRTMIN+3", "RTMAX-1", "37"),
// which have no such name, come back as their number ("37"), which both runtimes accept too.
func StopSignal(imageStopSignal string) (string, error) {
	s := strings.TrimSpace(imageStopSignal)
	if s == "" {
		return "SIGTERM", nil
	}
	num, err := parseSignal(s)
	if err != nil {
		return "", err
	}
	if name := unix.SignalName(syscall.Signal(num)); name != "" {
		return name, nil
	}
	return strconv.Itoa(num), nil
}

// CRIStopSignal is a ContainerConfig's stop_signal (KEP-4960) as StopSignal names it
// ("SIGQUIT"; "37" for SIGRTMIN+3); "" for RUNTIME_DEFAULT, which leaves the image's.
func CRIStopSignal(s runtimeapi.Signal) (string, error) {
	if s == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return "", nil
	}
	name, ok := runtimeapi.Signal_name[int32(s)]
	if !ok {
		return "", invalidf("config.stop_signal %d is not a signal this runtime knows", int32(s))
	}
	// SIGNAL_SIGRTMINPLUS3 is SIGRTMIN+3, SIGNAL_SIGRTMAXMINUS1 SIGRTMAX-1.
	name = strings.TrimPrefix(name, "SIGNAL_")
	name = strings.Replace(strings.Replace(name, "PLUS", "+", 1), "MINUS", "-", 1)
	out, err := StopSignal(name)
	if err != nil {
		return "", invalidf("config.stop_signal %s: %v", s, err)
	}
	return out, nil
}

// CRISignal is a signal as StopSignal names it, as the CRI's enum
// (ContainerStatus.stop_signal); RUNTIME_DEFAULT for one the enum lacks (32, 33).
func CRISignal(s string) runtimeapi.Signal {
	n, err := SignalNumber(s)
	if err != nil {
		return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
	}
	var name string
	switch rt := int(n); {
	case rt == sigRTMin:
		name = "SIGRTMIN"
	case rt == sigRTMax:
		name = "SIGRTMAX"
	case rt > sigRTMin && rt-sigRTMin <= 15:
		name = fmt.Sprintf("SIGRTMINPLUS%d", rt-sigRTMin)
	case rt > sigRTMin && rt < sigRTMax:
		name = fmt.Sprintf("SIGRTMAXMINUS%d", sigRTMax-rt)
	default:
		name = unix.SignalName(n)
	}
	return runtimeapi.Signal(runtimeapi.Signal_value["SIGNAL_"+name])
}

func parseSignal(s string) (int, error) {
	bad := func() (int, error) {
		return 0, invalidf("image STOPSIGNAL %q is not a signal", s)
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > sigRTMax {
			return bad()
		}
		return n, nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	switch name {
	case "IOT":
		name = "ABRT"
	case "POLL":
		name = "IO"
	case "CLD":
		name = "CHLD"
	}
	if n := unix.SignalNum("SIG" + name); n != 0 {
		return int(n), nil
	}
	for _, rt := range []struct {
		prefix string
		base   int
		sign   int
	}{{"RTMIN", sigRTMin, 1}, {"RTMAX", sigRTMax, -1}} {
		rest, ok := strings.CutPrefix(name, rt.prefix)
		if !ok {
			continue
		}
		off := 0
		if rest != "" {
			if (rt.sign > 0 && rest[0] != '+') || (rt.sign < 0 && rest[0] != '-') {
				return bad()
			}
			n, err := strconv.Atoi(rest[1:])
			if err != nil || n < 0 {
				return bad()
			}
			off = n
		}
		n := rt.base + rt.sign*off
		if n < sigRTMin || n > sigRTMax {
			return bad()
		}
		return n, nil
	}
	return bad()
}

// SignalNumber is a signal as StopSignal or a kill request names it ("SIGTERM", "KILL",
// "9", "37"), for runtimes that take numbers (shim v2's Kill).
func SignalNumber(s string) (syscall.Signal, error) {
	n, err := parseSignal(strings.TrimSpace(s))
	return syscall.Signal(n), err
}
