//go:build race

package policy

// raceEnabled: the race detector makes sync.Pool drop items at random, so code that
// allocates nothing otherwise (json.Valid's pooled scanner) does.
const raceEnabled = true
