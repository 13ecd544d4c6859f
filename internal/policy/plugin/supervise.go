package plugin

import (
	"context"
	"time"
)

// supervise keeps p running until ctx ends: every HealthInterval, and at once when a call to
// p failed, it checks the process (exited? answers go-plugin's health check?), and replaces a
// dead one, retrying with backoff until a start succeeds. One per plugin, owned by the Host,
// which cancels ctx and waits for it on Close.
func (p *process) supervise(ctx context.Context) {
	tick := time.NewTicker(p.opts.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-p.kick:
		}
		r := p.current()
		if r == nil || p.healthy(ctx, r) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		p.logger.Warn("policy plugin stopped; restarting it", "pid", r.pid, "fail_open", p.spec.FailOpen)
		p.stop(r)
		p.restart(ctx)
	}
}

// restart starts p again, after Backoff(1), then retries after Backoff(2), Backoff(3), … until
// a start succeeds or ctx ends. Meanwhile p's calls fail per its failure mode.
func (p *process) restart(ctx context.Context) {
	for attempt := 1; ; attempt++ {
		wait := time.NewTimer(p.opts.Backoff(attempt))
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		err := p.start(ctx)
		if err == nil {
			p.logger.Info("policy plugin restarted", "attempt", attempt)
			// Calls that failed while it was down asked for a check the new process does
			// not need.
			select {
			case <-p.kick:
			default:
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.logger.Warn("policy plugin restart failed; will retry", "attempt", attempt, "error", err.Error())
	}
}

// Backoff bounds: the first restart comes after minBackoff, and each failed one doubles the
// wait, up to maxBackoff.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// defaultBackoff is the wait before restart attempt n (from 1): 100 ms, 200 ms, 400 ms, …, 10 s.
func defaultBackoff(attempt int) time.Duration {
	d := minBackoff
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}
