package oci

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/rtshimd/rtshimd/internal/errdefs"
	"github.com/rtshimd/rtshimd/internal/fsafe/regfile"
)

// Field names used in ResolveUser's errors.
const (
	fieldRunAsUser       = "config.linux.security_context.run_as_user"
	fieldRunAsUsername   = "config.linux.security_context.run_as_username"
	fieldRunAsGroup      = "config.linux.security_context.run_as_group"
	fieldSupplemental    = "config.linux.security_context.supplemental_groups"
	fieldSupplementalPol = "config.linux.security_context.supplemental_groups_policy"
	fieldImageUser       = "image USER"
)

// invalidf formats an error that wraps errdefs.ErrInvalidArgument (the ": invalid argument"
// suffix is dropped again by internal/cri when it answers the client).
func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// passwdEntry and groupEntry are the parts of /etc/passwd and /etc/group lines we use.
type passwdEntry struct {
	name     string
	uid, gid uint32
}

type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// ResolveUser works out uid, gid and additional gids, from the CRI security context
// (run_as_user, run_as_username, run_as_group, supplemental_groups, supplemental_groups_policy)
// and the image's USER ("name", "uid", "name:group", "uid:gid"), against rootfs/etc/passwd and
// rootfs/etc/group.
//
// The user is run_as_username, else run_as_user, else the user part of the image's USER, else
// root. The group is run_as_group, else the group part of the image's USER (only when the
// user came from the image too), else the user's primary group in /etc/passwd, else 0. A named
// user or group missing from the files is an error naming it; a numeric uid need not be listed.
// The additional gids always hold the primary gid (as containerd does) and supplemental_groups;
// the Merge policy (default) adds the groups /etc/group lists the user in, Strict does not.
func ResolveUser(rootfs string, sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (specs.User, error) {
	var (
		userPart, groupPart string
		userField           = fieldImageUser
		userValue           = imageUser
	)
	switch {
	case sc.GetRunAsUsername() != "":
		userPart, userField, userValue = sc.GetRunAsUsername(), fieldRunAsUsername, sc.GetRunAsUsername()
	case sc.GetRunAsUser() != nil:
		v := sc.GetRunAsUser().GetValue()
		if v < 0 || v > math.MaxUint32 {
			return specs.User{}, invalidf("%s %d is not a valid uid", fieldRunAsUser, v)
		}
		userPart = strconv.FormatInt(v, 10)
		userField, userValue = fieldRunAsUser, userPart
	case imageUser != "":
		var hasGroup bool
		userPart, groupPart, hasGroup = strings.Cut(imageUser, ":")
		if userPart == "" || (hasGroup && groupPart == "") {
			return specs.User{}, invalidf("%s %q is not user, uid, user:group or uid:gid", fieldImageUser, imageUser)
		}
	default:
		userPart, userValue = "0", "0"
	}
	if g := sc.GetRunAsGroup(); g != nil {
		// As containerd and the conformance suite require: a group alone is a mistake.
		if sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
			return specs.User{}, invalidf("%s %d is set without run_as_user or run_as_username", fieldRunAsGroup, g.GetValue())
		}
		v := g.GetValue()
		if v < 0 || v > math.MaxUint32 {
			return specs.User{}, invalidf("%s %d is not a valid gid", fieldRunAsGroup, v)
		}
		groupPart = strconv.FormatInt(v, 10)
	}

	policy := sc.GetSupplementalGroupsPolicy()
	if _, ok := runtimeapi.SupplementalGroupsPolicy_name[int32(policy)]; !ok {
		return specs.User{}, invalidf("%s %d is not Merge or Strict", fieldSupplementalPol, policy)
	}

	users, err := readPasswd(rootfs)
	if err != nil {
		return specs.User{}, err
	}

	var (
		u     specs.User
		name  string // the user's name, for /etc/group membership
		found bool
	)
	if uid, ok := parseID(userPart); ok {
		u.UID = uid
		for _, e := range users {
			if e.uid == uid {
				u.GID, name = e.gid, e.name // a UID the image does not list is fine
				break
			}
		}
	} else {
		for _, e := range users {
			if e.name == userPart {
				u.UID, u.GID, name, found = e.uid, e.gid, e.name, true
				break
			}
		}
		if !found {
			return specs.User{}, invalidf("%s %q: no user %q in the image's /etc/passwd", userField, userValue, userPart)
		}
	}

	merge := policy == runtimeapi.SupplementalGroupsPolicy_Merge && name != ""
	gid, numericGroup := parseID(groupPart)
	var groups []groupEntry
	if merge || (groupPart != "" && !numericGroup) {
		if groups, err = readGroup(rootfs); err != nil {
			return specs.User{}, err
		}
	}
	switch {
	case groupPart == "":
	case numericGroup:
		u.GID = gid
	default: // a group name: only the image's USER can give one
		i := slices.IndexFunc(groups, func(g groupEntry) bool { return g.name == groupPart })
		if i < 0 {
			return specs.User{}, invalidf("%s %q: no group %q in the image's /etc/group", fieldImageUser, imageUser, groupPart)
		}
		u.GID = groups[i].gid
	}

	gids := []uint32{u.GID}
	if merge {
		for _, g := range groups {
			if slices.Contains(g.members, name) {
				gids = append(gids, g.gid)
			}
		}
	}
	for i, g := range sc.GetSupplementalGroups() {
		if g < 0 || g > math.MaxUint32 {
			return specs.User{}, invalidf("%s[%d] %d is not a valid gid", fieldSupplemental, i, g)
		}
		gids = append(gids, uint32(g))
	}
	slices.Sort(gids)
	u.AdditionalGids = slices.Compact(gids)
	return u, nil
}

// parseID parses a numeric uid or gid.
func parseID(s string) (uint32, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(v), true
}

// readRootfsFile reads name (relative, e.g. "etc/passwd") inside rootfs without following
// symlinks out of it. A missing file (or rootfs "") reads as nil with no error.
func readRootfsFile(rootfs, name string) ([]byte, error) {
	if rootfs == "" {
		return nil, nil
	}
	// Guard against a huge file: /etc/passwd of a real image is a few KiB. A FIFO or a
	// device there is refused, never opened.
	data, err := regfile.ReadInRoot(rootfs, name, 16<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, invalidf("read the image's /%s: %s", name, errText(err))
	}
	return data, nil
}

// readPasswd parses rootfs/etc/passwd (name:password:uid:gid:gecos:home:shell); malformed
// lines are skipped, as libc does.
func readPasswd(rootfs string) ([]passwdEntry, error) {
	data, err := readRootfsFile(rootfs, "etc/passwd")
	if err != nil || data == nil {
		return nil, err
	}
	var out []passwdEntry
	forEachLine(data, func(fields []string) {
		if len(fields) < 4 {
			return
		}
		uid, ok1 := parseID(fields[2])
		gid, ok2 := parseID(fields[3])
		if !ok1 || !ok2 || fields[0] == "" {
			return
		}
		out = append(out, passwdEntry{name: fields[0], uid: uid, gid: gid})
	})
	return out, nil
}

// readGroup parses rootfs/etc/group (name:password:gid:member,member).
func readGroup(rootfs string) ([]groupEntry, error) {
	data, err := readRootfsFile(rootfs, "etc/group")
	if err != nil || data == nil {
		return nil, err
	}
	var out []groupEntry
	forEachLine(data, func(fields []string) {
		if len(fields) < 3 || fields[0] == "" {
			return
		}
		gid, ok := parseID(fields[2])
		if !ok {
			return
		}
		g := groupEntry{name: fields[0], gid: gid}
		if len(fields) > 3 {
			for _, m := range strings.Split(fields[3], ",") {
				if m = strings.TrimSpace(m); m != "" {
					g.members = append(g.members, m)
				}
			}
		}
		out = append(out, g)
	})
	return out, nil
}

// forEachLine calls fn with the colon-separated fields of every line that is not empty, a
// comment, or a NIS "+"/"-" entry.
func forEachLine(data []byte, fn func(fields []string)) {
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		fn(strings.Split(line, ":"))
	}
}
