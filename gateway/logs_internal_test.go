package gateway

import (
	"slices"
	"testing"

	"github.com/manifold-mcp/manifold/internal/session"
)

// TestLogListenersIndex: the index gives the most verbose level asked for, which changes as
// sessions set their level and end, and the sessions a message of each level reaches.
func TestLogListenersIndex(t *testing.T) {
	var x logListeners
	steps := []struct {
		name    string
		do      func() bool
		changed bool
		lowest  string
		// reach are the sessions a message at warning reaches, sorted.
		reach []string
	}{
		{"a session without a level", func() bool { return x.track("none", "", "") }, false, "", []string{"none"}},
		{"one at error", func() bool { return x.track("err", "", "error") }, true, "error", []string{"none"}},
		{"one at info", func() bool { return x.track("info", "", "info") }, true, "info", []string{"info", "none"}},
		{"the same again", func() bool { return x.track("info", "", "info") }, false, "info", []string{"info", "none"}},
		{"error set to debug", func() bool { return x.setLevel("err", "debug") }, true, "debug", []string{"err", "info", "none"}},
		{"an unknown session's level", func() bool { return x.setLevel("gone", "debug") }, false, "debug", []string{"err", "info", "none"}},
		{"a record read before the level was set", func() bool { return x.track("err", "", "error") }, false, "debug", []string{"err", "info", "none"}},
		{"a record read after it", func() bool { return x.track("err", "", "debug") }, false, "debug", []string{"err", "info", "none"}},
		{"a record that changed since (set on a replica whose notice was lost)", func() bool { return x.track("err", "", "critical") }, true, "info", []string{"info", "none"}},
		{"and back", func() bool { return x.track("err", "", "debug") }, true, "debug", []string{"err", "info", "none"}},
		{"the debug one ends", func() bool { return x.drop("err") }, true, "info", []string{"info", "none"}},
		{"an unknown one ends", func() bool { return x.drop("err") }, false, "info", []string{"info", "none"}},
		{"the info one ends", func() bool { return x.drop("info") }, true, "", []string{"none"}},
	}
	for _, st := range steps {
		if got := st.do(); got != st.changed {
			t.Errorf("%s: lowest level changed %v, want %v", st.name, got, st.changed)
		}
		if got := x.lowest(); got != st.lowest {
			t.Errorf("%s: lowest level %q, want %q", st.name, got, st.lowest)
		}
		var reach []string
		x.each(levelRank("warning"), func(id, _ string) { reach = append(reach, id) })
		slices.Sort(reach)
		if !slices.Equal(reach, st.reach) {
			t.Errorf("%s: a warning reaches %v, want %v", st.name, reach, st.reach)
		}
	}
	var unknown []string
	x.each(levelRank("bogus"), func(id, _ string) { unknown = append(unknown, id) })
	if !slices.Equal(unknown, []string{"none"}) {
		t.Errorf("a message of an unknown level reaches %v, want only the session without a level", unknown)
	}
	if got := x.byDigest(session.Digest("none")); got != "none" {
		t.Errorf("byDigest = %q, want none", got)
	}
}
