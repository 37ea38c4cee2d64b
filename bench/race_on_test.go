//go:build race

package bench

// raceEnabled: timing ratios mean little under the race detector.
const raceEnabled = true
