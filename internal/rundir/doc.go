// Package rundir keeps the agent's and dpu-fabric's run directories and
// the files in them from being turned against their owner.
//
// A run directory holds sockets that root's tools talk to and files that
// root writes. If another user can write the directory (or any directory
// above it), that user can rename a socket and put up a fake one, or swap
// a name for a symlink between a bind and a chmod/chown so that root
// changes the mode of a file of the attacker's choosing. So:
//
//   - Check refuses a directory not owned by the expected user, or one that
//     the group or others may write, and any parent that others may write
//     unless it is sticky (like /tmp) and the entry below it is owned by
//     the user or root. Options.Insecure lets an operator override this
//     with a warning;
//   - OpenDir opens a checked directory once, by descriptor (openat2 with
//     RESOLVE_NO_SYMLINKS, or an O_PATH|O_NOFOLLOW walk on older
//     kernels), makes sure it is the directory that was checked, and names
//     it through the descriptor from then on (Dir.Path, /proc/self/fd/N):
//     renaming the directory or replacing what its path leads to changes
//     nothing for its holder;
//   - Listen binds a UNIX socket inside a fresh private (0700) directory,
//     sets its mode and group there, where nobody else can reach the name,
//     and renames it into place;
//   - WriteFile creates files under a temporary name with
//     O_CREAT|O_EXCL|O_NOFOLLOW, sets mode and owner on the descriptor
//     (fchmod/fchown) and renames them into place;
//   - OpenTrusted opens a file with O_NOFOLLOW and accepts it only when
//     its owner is the expected user and no one else may write it;
//     OpenConfig also accepts root's, follows only symlinks no other user
//     can turn, and opens the path they lead to with RESOLVE_NO_SYMLINKS.
//
// The package never follows a symlink on a path it changes the mode or
// owner of, and never changes anything it did not create.
package rundir
