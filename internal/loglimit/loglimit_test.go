package loglimit

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestHandler: one warning per message and second passes; those held back are counted
// on the next that passes; other messages, and other levels, are not held back.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	text := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	logger := slog.New(NewHandler(text, time.Second, func() time.Time { return now })).With("upstream", "u")
	for range 500 {
		logger.Warn("garbage")
		logger.Info("stderr line")
		logger.Error("request failed")
	}
	logger.Warn("other")
	now = now.Add(time.Second)
	logger.Warn("garbage")
	out := buf.String()
	for _, c := range []struct {
		record string
		want   int
	}{
		{"level=WARN msg=garbage upstream=u\n", 1},
		{"level=WARN msg=garbage upstream=u suppressed=499\n", 1},
		{"level=WARN msg=other", 1},
		{"level=INFO msg=\"stderr line\"", 500},
		{"level=ERROR msg=\"request failed\"", 500},
	} {
		if n := strings.Count(out, c.record); n != c.want {
			t.Errorf("%d × %q in the log, want %d", n, c.record, c.want)
		}
	}
}

// TestOutage: while a dependency fails, the first failure of each message passes in full and
// then one per message and interval, with the count held back since; the first success
// logs one line with the outage's length and the count held back in all, and nothing while
// nothing fails; a failure after that begins a new outage.
func TestOutage(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	o := NewOutage(logger, "the store", time.Minute, func() time.Time { return now })
	ctx := context.Background()
	o.OK(ctx)
	for range 100 {
		o.Failed(ctx, slog.LevelError, "get failed", "error", "EOF")
	}
	o.Failed(ctx, slog.LevelWarn, "touch failed")
	now = now.Add(time.Minute)
	o.Failed(ctx, slog.LevelError, "get failed", "error", "EOF")
	o.Failed(ctx, slog.LevelError, "get failed", "error", "EOF")
	now = now.Add(5 * time.Second)
	o.OK(ctx)
	o.OK(ctx)
	o.Failed(ctx, slog.LevelError, "get failed", "error", "EOF")
	want := `level=ERROR msg="get failed" error=EOF
level=WARN msg="touch failed"
level=ERROR msg="get failed" error=EOF suppressed=99
level=INFO msg="the store is reachable again" outage=1m5s suppressed=100
level=ERROR msg="get failed" error=EOF
`
	if got := buf.String(); got != want {
		t.Errorf("the log:\n%s\nwant:\n%s", got, want)
	}
}

// TestOutageBlipIsNotLoggedAsRecovered: a failure whose line was logged in full, followed
// soon by a success, is a blip: no "reachable again" line (outage 0s, suppressed 0) follows
// it. One is logged once failures were held back, or once the outage lasted an interval.
func TestOutageBlipIsNotLoggedAsRecovered(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	o := NewOutage(logger, "the store", time.Minute, func() time.Time { return now })
	ctx := context.Background()
	// A blip: one failure, answered again a second later.
	o.Failed(ctx, slog.LevelError, "get failed")
	now = now.Add(time.Second)
	o.OK(ctx)
	// Two failures, one held back.
	o.Failed(ctx, slog.LevelError, "get failed")
	o.Failed(ctx, slog.LevelError, "get failed")
	o.OK(ctx)
	// One failure, and nothing answered for a minute.
	o.Failed(ctx, slog.LevelWarn, "touch failed")
	now = now.Add(time.Minute)
	o.OK(ctx)
	want := `level=ERROR msg="get failed"
level=ERROR msg="get failed"
level=INFO msg="the store is reachable again" outage=0s suppressed=1
level=WARN msg="touch failed"
level=INFO msg="the store is reachable again" outage=1m0s suppressed=0
`
	if got := buf.String(); got != want {
		t.Errorf("the log:\n%s\nwant:\n%s", got, want)
	}
}
