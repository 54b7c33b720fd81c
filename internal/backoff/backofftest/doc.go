// Package backofftest drives a server's accept back-off (package
// internal/backoff) in tests: a listener whose first accepts fail with
// the errors given, a log that collects what the server said, and the
// check that every failure was logged with the wait the back-off gives
// and that the next accept came no sooner.
package backofftest
