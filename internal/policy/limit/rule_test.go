package limit

import (
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
)

func TestRetryAfterIsWholeMillisecondsAbove(t *testing.T) {
	tests := []struct {
		seconds float64
		want    time.Duration
	}{
		{0.2, 201 * time.Millisecond}, // on a millisecond: one more
		{0.2004, 201 * time.Millisecond},
		{1.0 / 3, 334 * time.Millisecond},
		{1e-9, time.Millisecond},
		{0, time.Millisecond},
		{-1, time.Millisecond},
		{3600, time.Hour + time.Millisecond},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.seconds); got != tt.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tt.seconds, got, tt.want)
		}
	}
}

// TestGCRALimitKeepsTheSpacing: whatever the period chosen, requests are spaced by
// 1/perSecond and the burst is kept.
func TestGCRALimitKeepsTheSpacing(t *testing.T) {
	tests := []struct {
		perSecond float64
		per       time.Duration
		want      redis_rate.Limit
	}{
		{5, time.Second, redis_rate.Limit{Rate: 5, Burst: 3, Period: time.Second}},
		{10, time.Minute, redis_rate.Limit{Rate: 600, Burst: 3, Period: time.Minute}},
		{2.0 / 3600, time.Hour, redis_rate.Limit{Rate: 2, Burst: 3, Period: time.Hour}},
		{7, 0, redis_rate.Limit{Rate: 7, Burst: 3, Period: time.Second}},
		{2.5, 0, redis_rate.Limit{Rate: 1, Burst: 3, Period: 400 * time.Millisecond}},
		{0.25, time.Second, redis_rate.Limit{Rate: 1, Burst: 3, Period: 4 * time.Second}},
	}
	for _, tt := range tests {
		if got := gcraLimit(tt.perSecond, tt.per, 3); got != tt.want {
			t.Errorf("gcraLimit(%v, %v) = %+v, want %+v", tt.perSecond, tt.per, got, tt.want)
		}
	}
}
