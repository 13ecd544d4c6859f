package testwait

import (
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	n := 0
	if !Within(time.Minute, func() bool { n++; return n == 3 }) || n != 3 {
		t.Errorf("Within returned before the condition held, or checked it %d times", n)
	}
	if Within(30*time.Millisecond, func() bool { return false }) {
		t.Error("Within reported a condition that never holds")
	}
}
