package gva

// Attr is the owner and permission of a page, fixed when it is allocated:
// a uid, a gid and permission bits (0o777) read as a file's are.
type Attr struct {
	UID, GID uint32
	Mode     uint32 // permission bits: read 4, write 2 per class (owner, group, other)
}

// Cred is the user a request is made for: the uid and gid the kernel
// recorded for the host process (SO_PEERCRED) and its supplementary groups.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

// Access bits of a page mode, per class.
const (
	AccessRead  uint32 = 4
	AccessWrite uint32 = 2
)

// Member reports whether c's gid or one of its supplementary groups is gid.
func (c Cred) Member(gid uint32) bool {
	if c.GID == gid {
		return true
	}
	for _, g := range c.Groups {
		if g == gid {
			return true
		}
	}
	return false
}

// Allows reports whether c may access a page with attributes a as need
// (AccessRead, AccessWrite or both).
func Allows(a Attr, c Cred, need uint32) bool { return AllowsAs(a, c.UID, c.Member(a.GID), need) }

// AllowsAs is the page permission rule, the one every check of the
// product applies: uid 0 may do anything; otherwise the owner class
// applies when uid is the page's, else the group class when the user is a
// member of the page's group, else the other class, and every bit of need
// must be set in it.
func AllowsAs(a Attr, uid uint32, member bool, need uint32) bool {
	if uid == 0 {
		return true
	}
	bits := a.Mode
	switch {
	case uid == a.UID:
		bits >>= 6
	case member:
		bits >>= 3
	}
	return bits&need == need
}
