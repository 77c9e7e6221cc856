package oci

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// passwdEntry is one line of an /etc/passwd.
type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

// groupEntry is one line of an /etc/group.
type groupEntry struct {
	name    string
	gid     uint32
	members []string
}

// resolveUser decides the container's user the way containerd does: run_as_user, else
// run_as_username, else the image's User ("uid", "uid:gid", "name", "name:group");
// run_as_group replaces the group. Names are looked up in the root filesystem's
// /etc/passwd and /etc/group (read without leaving the root filesystem, whatever
// links it holds). Additional groups are the user's groups in /etc/group (unless the
// policy is Strict) and then supplemental_groups. It also returns the user's home
// directory ("" if unknown).
func resolveUser(rootfs string, sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (specs.User, string, error) {
	var (
		users  []passwdEntry
		groups []groupEntry
		loaded bool
		err    error
	)
	load := func() error {
		if loaded {
			return err
		}
		loaded = true
		if users, err = readPasswd(rootfs); err != nil {
			return err
		}
		groups, err = readGroup(rootfs)
		return err
	}
	byUID := func(uid uint32) *passwdEntry {
		for i := range users {
			if users[i].uid == uid {
				return &users[i]
			}
		}
		return nil
	}
	byName := func(name string) *passwdEntry {
		for i := range users {
			if users[i].name == name {
				return &users[i]
			}
		}
		return nil
	}
	if err := load(); err != nil {
		return specs.User{}, "", err
	}

	var u specs.User
	var entry *passwdEntry
	switch {
	case sc.GetRunAsUser() != nil:
		v := sc.GetRunAsUser().GetValue()
		if v < 0 || v > math.MaxUint32 {
			return specs.User{}, "", invalid("run_as_user %d is out of range", v)
		}
		u.UID = uint32(v)
		entry = byUID(u.UID)
	case sc.GetRunAsUsername() != "":
		if entry = byName(sc.GetRunAsUsername()); entry == nil {
			return specs.User{}, "", invalid("run_as_username %q is not in the image's /etc/passwd", sc.GetRunAsUsername())
		}
		u.UID = entry.uid
	default:
		userPart, groupPart, hasGroup := strings.Cut(imageUser, ":")
		if userPart != "" {
			if n, err := strconv.ParseUint(userPart, 10, 32); err == nil {
				u.UID = uint32(n)
				entry = byUID(u.UID)
			} else if entry = byName(userPart); entry == nil {
				return specs.User{}, "", invalid("image user %q is not in the image's /etc/passwd", userPart)
			} else {
				u.UID = entry.uid
			}
		} else {
			entry = byUID(0)
		}
		if hasGroup {
			if groupPart == "" {
				return specs.User{}, "", invalid("image user %q has an empty group", imageUser)
			}
			if n, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
				u.GID = uint32(n)
			} else {
				i := slices.IndexFunc(groups, func(g groupEntry) bool { return g.name == groupPart })
				if i < 0 {
					return specs.User{}, "", invalid("image group %q is not in the image's /etc/group", groupPart)
				}
				u.GID = groups[i].gid
			}
		}
		if !hasGroup && entry != nil {
			u.GID = entry.gid
		}
	}
	if sc.GetRunAsUser() != nil || sc.GetRunAsUsername() != "" {
		if entry != nil {
			u.GID = entry.gid
		}
	}
	if g := sc.GetRunAsGroup(); g != nil {
		if g.GetValue() < 0 || g.GetValue() > math.MaxUint32 {
			return specs.User{}, "", invalid("run_as_group %d is out of range", g.GetValue())
		}
		u.GID = uint32(g.GetValue())
	}

	var extra []uint32
	if entry != nil && sc.GetSupplementalGroupsPolicy() != runtimeapi.SupplementalGroupsPolicy_Strict {
		for _, g := range groups {
			if slices.Contains(g.members, entry.name) {
				extra = append(extra, g.gid)
			}
		}
	}
	for _, g := range sc.GetSupplementalGroups() {
		if g < 0 || g > math.MaxUint32 {
			return specs.User{}, "", invalid("supplemental group %d is out of range", g)
		}
		extra = append(extra, uint32(g))
	}
	for _, g := range extra {
		if g != u.GID && !slices.Contains(u.AdditionalGids, g) {
			u.AdditionalGids = append(u.AdditionalGids, g)
		}
	}
	home := ""
	if entry != nil {
		home = entry.home
	}
	return u, home, nil
}

// maxDBSize bounds how much of an image's passwd or group file is read.
const maxDBSize = 4 << 20

// readDB returns the colon-separated fields of each line of a root filesystem's
// passwd or group file, skipping comments and NIS lines. The file is opened with
// openRootFile: inside the root filesystem, and only if it is a regular file.
func readDB(root, name string) ([][]string, error) {
	f, err := openRootFile(root, name)
	if err != nil || f == nil {
		return nil, err
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, maxDBSize))
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s in %s: %w", name, root, err)
	}
	return out, nil
}

func readPasswd(root string) ([]passwdEntry, error) {
	lines, err := readDB(root, "etc/passwd")
	if err != nil {
		return nil, err
	}
	var out []passwdEntry
	for _, f := range lines {
		if len(f) < 4 {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		e := passwdEntry{name: f[0], uid: uint32(uid), gid: uint32(gid)}
		if len(f) > 5 {
			e.home = f[5]
		}
		out = append(out, e)
	}
	return out, nil
}

func readGroup(root string) ([]groupEntry, error) {
	lines, err := readDB(root, "etc/group")
	if err != nil {
		return nil, err
	}
	var out []groupEntry
	for _, f := range lines {
		if len(f) < 3 {
			continue
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			continue
		}
		e := groupEntry{name: f[0], gid: uint32(gid)}
		if len(f) > 3 && f[3] != "" {
			e.members = strings.Split(f[3], ",")
		}
		out = append(out, e)
	}
	return out, nil
}
