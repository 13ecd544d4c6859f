package loglimit

import (
	"bytes"
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
