//go:build dpubug

package clock

// bugsCompiled: this build carries the planted bugs (tests of the
// simulator's checkers build with -tags dpubug; the product never does).
const bugsCompiled = true

// symmetric is the planted bug BugSymmetric: it takes the two directions'
// delays for equal to within half the round trip, keeping only the middle
// half of a sample's interval, which is wrong on an asymmetric link.
func symmetric(lo, hi int64) (int64, int64) {
	q := (hi - lo) / 4
	return lo + q, hi - q
}
