// Package testclock is a clock that tests move by hand, for code that takes a func() time.Time.
//
//	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
//	gw, _ := gateway.New(cfg, &gateway.Options{Now: clock.Now})
//	clock.Advance(time.Minute)
package testclock

import (
	"sync"
	"time"
)

// Clock is a fake clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock that stands at start until advanced.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
