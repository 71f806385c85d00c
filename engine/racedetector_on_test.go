//go:build race

package engine

// raceEnabled reports whether the race detector is built in (the
// simulator runs fewer seeds by default under it).
const raceEnabled = true
