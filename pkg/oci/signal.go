package oci

import (
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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
