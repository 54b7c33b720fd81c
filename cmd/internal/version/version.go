// Package version says which build a dpu binary is, from the build
// information the Go toolchain embeds (runtime/debug): the module version,
// the VCS revision and time, whether the tree was modified, and the Go
// version. Every binary prints it for --version.
package version

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// String is "NAME VERSION (revision REV[, modified], TIME) GO": the line
// --version prints.
func String(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	return format(name, bi)
}

func format(name string, bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", name, v)
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, " (revision %s", rev)
		if modified {
			b.WriteString(", modified")
		}
		if at != "" {
			fmt.Fprintf(&b, ", %s", at)
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, " %s", bi.GoVersion)
	return b.String()
}
