package gateway

import "testing"

func TestCallersInFlight(t *testing.T) {
	c := newCallersInFlight(2)
	steps := []struct {
		admit  bool // else release
		caller string
		want   bool
	}{
		{true, "a", true},
		{true, "a", true},
		{true, "a", false}, // a has its 2
		{true, "b", true},  // b counts apart
		{false, "a", true},
		{true, "a", true}, // room again
		{false, "a", true},
		{false, "a", true},
		{false, "b", true},
	}
	for i, s := range steps {
		if !s.admit {
			c.release(s.caller)
			continue
		}
		if got := c.admit(s.caller); got != s.want {
			t.Fatalf("step %d: admit(%q) = %v, want %v", i, s.caller, got, s.want)
		}
	}
	if len(c.inFlight) != 0 {
		t.Errorf("entries left after every request was released: %v", c.inFlight)
	}
}
