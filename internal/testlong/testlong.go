// Package testlong sizes the long test campaigns: the SIGKILL campaigns,
// the power-cut sweeps, the fork chains, the hostile tables and the other
// tests with a big loop. Each has three sizes:
//
//   - go test -short: a few rounds (CI runs -race with -short);
//   - go test: the default, a short campaign that still reaches every
//     kind of moment it was written for, so that the README's test
//     command stays within a few minutes on two cores;
//   - SEGLOG_LONG=1 go test: the long campaign (.ci/run runs it in a step
//     of its own). It wins over -short.
//
// Finer variables of single tests (SEGLOG_SIGKILL_ROUNDS,
// SEGLOG_FORK_CHAINS) still override the size they name.
//
// testlong imports only os, fmt and testing.
package testlong

import (
	"fmt"
	"os"
	"testing"
)

// Env is the environment variable that asks for the long campaigns:
// SEGLOG_LONG=1. Unset, empty or 0: the default sizes.
const Env = "SEGLOG_LONG"

// On reports whether SEGLOG_LONG=1 asks for the long campaigns. Any other
// value but empty or 0 panics, so that a typo does not run the short ones
// silently.
func On() bool {
	switch v := os.Getenv(Env); v {
	case "", "0":
		return false
	case "1":
		return true
	default:
		panic(fmt.Sprintf("%s=%q: want 1 (the long campaigns) or 0", Env, v))
	}
}

// Pick returns long with SEGLOG_LONG=1, short under go test -short, and
// def otherwise.
func Pick[T any](short, def, long T) T {
	switch {
	case On():
		return long
	case testing.Short():
		return short
	}
	return def
}
