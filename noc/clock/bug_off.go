//go:build !dpubug

package clock

// bugsCompiled: the product carries no planted bug; Config.Bug is refused
// (see bug_on.go, built with -tags dpubug for the checkers' tests).
const bugsCompiled = false

// symmetric is the planted bug BugSymmetric; never in the product.
func symmetric(lo, hi int64) (int64, int64) { return lo, hi }
