package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/manifold-mcp/manifold/internal/testwait"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// aCall is a tools/call with args as its arguments.
func aCall(args string) Call {
	return Call{
		Principal:          Principal{Issuer: "https://issuer.example", Subject: "alice", Email: "alice@example.com", Groups: []string{"eng"}},
		SessionFingerprint: "0a1b2c3d4e5f",
		Upstream:           "github",
		Method:             "tools/call",
		Target:             "search",
		Exposed:            "github__search",
		Arguments:          json.RawMessage(args),
		Annotations:        json.RawMessage(`{"readOnlyHint":true}`),
	}
}

// ignoreErr compares Results without their Err (checked apart, with errors.Is/As).
var ignoreErr = cmpopts.IgnoreFields(Result{}, "Err")

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return cmp.Equal(va, vb)
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		spec     Spec
		args     string
		want     Outcome // Arguments compared as JSON
		wantArgs string
	}{
		{
			name: "allow",
			spec: testSpec("t", `{}`),
			args: `{"q":"go"}`,
			want: Outcome{Effect: Allow, Results: []Result{{Plugin: "t", Effect: Allow}}},
		},
		{
			name: "deny with the plugin's reason",
			spec: testSpec("t", `{"effect":"deny","reason":"not on Fridays"}`),
			args: `{}`,
			want: Outcome{Effect: Deny, Reason: "not on Fridays", Results: []Result{{Plugin: "t", Effect: Deny, Reason: "not on Fridays"}}},
		},
		{
			name: "deny without a reason names the plugin",
			spec: testSpec("t", `{"effect":"deny"}`),
			args: `{}`,
			want: Outcome{Effect: Deny, Reason: `the policy plugin "t" refused the call`, Results: []Result{{Plugin: "t", Effect: Deny, Reason: `the policy plugin "t" refused the call`}}},
		},
		{
			name: "require approval",
			spec: testSpec("t", `{"effect":"require_approval","reason":"writes to prod"}`),
			args: `{}`,
			want: Outcome{Effect: RequireApproval, Reason: "writes to prod", Results: []Result{{Plugin: "t", Effect: RequireApproval, Reason: "writes to prod"}}},
		},
		{
			name:     "rewrite",
			spec:     testSpec("t", `{"effect":"rewrite","arguments":{"q":"go","limit":5}}`),
			args:     `{"q":"go"}`,
			want:     Outcome{Effect: Allow, Results: []Result{{Plugin: "t", Effect: Rewrite}}},
			wantArgs: `{"q":"go","limit":5}`,
		},
		{
			name: "guard denies a blocked pattern, naming it",
			spec: guardSpec("guard", `{"block":["(?i)drop\\s+table"]}`),
			args: `{"sql":{"stmts":["select 1","DROP  TABLE users"]}}`,
			want: Outcome{Effect: Deny, Reason: `the argument "/sql/stmts/1" matches the blocked pattern "(?i)drop\\s+table"`,
				Results: []Result{{Plugin: "guard", Effect: Deny, Reason: `the argument "/sql/stmts/1" matches the blocked pattern "(?i)drop\\s+table"`}}},
		},
		{
			name:     "guard adds defaults by a rewrite",
			spec:     guardSpec("guard", `{"block":["secret"],"defaults":{"limit":10,"q":"ignored"}}`),
			args:     `{"q":"go"}`,
			want:     Outcome{Effect: Allow, Results: []Result{{Plugin: "guard", Effect: Rewrite}}},
			wantArgs: `{"q":"go","limit":10}`,
		},
		{
			name: "guard allows what it does not block",
			spec: guardSpec("guard", `{"block":["secret"],"defaults":{"limit":10}}`),
			args: `{"q":"go","limit":3}`,
			want: Outcome{Effect: Allow, Results: []Result{{Plugin: "guard", Effect: Allow}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, []Spec{tt.spec}, nil)
			got, err := h.Decide(context.Background(), aCall(tt.args))
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, ignoreErr, cmpopts.IgnoreFields(Outcome{}, "Arguments")); diff != "" {
				t.Errorf("Outcome (-want +got):\n%s", diff)
			}
			for _, r := range got.Results {
				if r.Err != nil {
					t.Errorf("Result %s: Err = %v", r.Plugin, r.Err)
				}
			}
			if tt.wantArgs == "" {
				if got.Arguments != nil {
					t.Errorf("Arguments = %s, want none (no rewrite)", got.Arguments)
				}
			} else if !jsonEqual(t, got.Arguments, []byte(tt.wantArgs)) {
				t.Errorf("Arguments = %s, want %s", got.Arguments, tt.wantArgs)
			}
		})
	}
}

func TestDecideInOrder(t *testing.T) {
	t.Run("the first deny wins", func(t *testing.T) {
		h := start(t, []Spec{
			testSpec("approver", `{"effect":"require_approval","reason":"a"}`),
			testSpec("rewriter", `{"effect":"rewrite","arguments":{"sql":"drop table users"}}`),
			guardSpec("guard", `{"block":["drop table"]}`), // sees the rewritten arguments
			testSpec("denier", `{"effect":"deny","reason":"never asked"}`),
		}, nil)
		got, err := h.Decide(context.Background(), aCall(`{"sql":"select 1"}`))
		if err != nil {
			t.Fatal(err)
		}
		want := Outcome{
			Effect: Deny,
			Reason: `the argument "/sql" matches the blocked pattern "drop table"`,
			Results: []Result{
				{Plugin: "approver", Effect: RequireApproval, Reason: "a"},
				{Plugin: "rewriter", Effect: Rewrite},
				{Plugin: "guard", Effect: Deny, Reason: `the argument "/sql" matches the blocked pattern "drop table"`},
			},
		}
		if diff := cmp.Diff(want, got, ignoreErr, cmpopts.IgnoreFields(Outcome{}, "Arguments")); diff != "" {
			t.Errorf("Outcome (-want +got):\n%s", diff)
		}
	})
	t.Run("approvals are remembered and rewrites passed on", func(t *testing.T) {
		h := start(t, []Spec{
			testSpec("approver1", `{"effect":"require_approval","reason":"a"}`),
			testSpec("rewriter", `{"effect":"rewrite","arguments":{"q":"go"}}`),
			guardSpec("guard", `{"defaults":{"limit":10}}`), // rewrites the rewrite
			testSpec("approver2", `{"effect":"require_approval","reason":"b"}`),
			testSpec("allower", `{}`),
		}, nil)
		got, err := h.Decide(context.Background(), aCall(`{"q":"rust"}`))
		if err != nil {
			t.Fatal(err)
		}
		want := Outcome{
			Effect: RequireApproval,
			Reason: "a; b",
			Results: []Result{
				{Plugin: "approver1", Effect: RequireApproval, Reason: "a"},
				{Plugin: "rewriter", Effect: Rewrite},
				{Plugin: "guard", Effect: Rewrite},
				{Plugin: "approver2", Effect: RequireApproval, Reason: "b"},
				{Plugin: "allower", Effect: Allow},
			},
		}
		if diff := cmp.Diff(want, got, ignoreErr, cmpopts.IgnoreFields(Outcome{}, "Arguments")); diff != "" {
			t.Errorf("Outcome (-want +got):\n%s", diff)
		}
		if !jsonEqual(t, got.Arguments, []byte(`{"q":"go","limit":10}`)) {
			t.Errorf("Arguments = %s, want the guard's rewrite of the rewriter's", got.Arguments)
		}
	})
	t.Run("a plugin asks only about the calls it sees", func(t *testing.T) {
		blind := testSpec("denier", `{"effect":"deny","reason":"not for this upstream"}`)
		blind.Sees = func(c Call) bool { return c.Upstream == "elsewhere" }
		h := start(t, []Spec{blind, testSpec("allower", `{}`)}, nil)
		got, err := h.Decide(context.Background(), aCall(`{}`))
		if err != nil || got.Effect != Allow || len(got.Results) != 1 || got.Results[0].Plugin != "allower" {
			t.Errorf("Decide = %+v, %v; want Allow by the allower alone", got, err)
		}
	})
	t.Run("no plugins allow", func(t *testing.T) {
		h := start(t, nil, nil)
		got, err := h.Decide(context.Background(), aCall(`{}`))
		if err != nil || got.Effect != Allow {
			t.Errorf("Decide = %+v, %v; want Allow", got, err)
		}
	})
}

func TestInspect(t *testing.T) {
	t.Run("guard redacts e-mail addresses in content and structuredContent", func(t *testing.T) {
		h := start(t, []Spec{guardSpec("guard", `{}`)}, nil)
		result := `{
			"content": [
				{"type": "text", "text": "mail alice@example.com or bob.smith+x@mail.example.org"},
				{"type": "image", "data": "aGk=", "mimeType": "image/png"},
				{"type": "text", "text": "nothing here"}
			],
			"structuredContent": {"owner": {"email": "carol@example.net", "ids": [12345678901234567890]}, "cc": ["dave@example.com", 3]},
			"isError": false,
			"_meta": {"x": "erin@example.com stays: only content and structuredContent are redacted"}
		}`
		want := `{
			"content": [
				{"type": "text", "text": "mail [redacted email] or [redacted email]"},
				{"type": "image", "data": "aGk=", "mimeType": "image/png"},
				{"type": "text", "text": "nothing here"}
			],
			"structuredContent": {"owner": {"email": "[redacted email]", "ids": [12345678901234567890]}, "cc": ["[redacted email]", 3]},
			"isError": false,
			"_meta": {"x": "erin@example.com stays: only content and structuredContent are redacted"}
		}`
		got, results, err := h.Inspect(context.Background(), aCall(`{}`), json.RawMessage(result))
		if err != nil {
			t.Fatal(err)
		}
		if !jsonEqual(t, got, []byte(want)) {
			t.Errorf("Inspect = %s\nwant %s", got, want)
		}
		if !strings.Contains(string(got), "12345678901234567890") {
			t.Errorf("a large integer lost precision: %s", got)
		}
		if diff := cmp.Diff([]Result{{Plugin: "guard", Effect: Rewrite}}, results, ignoreErr); diff != "" {
			t.Errorf("Results (-want +got):\n%s", diff)
		}
	})
	t.Run("an unchanged result is passed on as is", func(t *testing.T) {
		h := start(t, []Spec{guardSpec("guard", `{}`)}, nil)
		result := json.RawMessage(`{"content":[{"type":"text","text":"no address"}]}`)
		got, results, err := h.Inspect(context.Background(), aCall(`{}`), result)
		if err != nil || string(got) != string(result) {
			t.Errorf("Inspect = %s, %v; want the result unchanged", got, err)
		}
		if diff := cmp.Diff([]Result{{Plugin: "guard", Effect: Allow}}, results, ignoreErr); diff != "" {
			t.Errorf("Results (-want +got):\n%s", diff)
		}
	})
	t.Run("only the plugins that declared it, in order, each seeing the last's output", func(t *testing.T) {
		h := start(t, []Spec{
			inspecting(testSpec("marker", `{"mark":"write to frank@example.com"}`)),
			testSpec("decider", `{"error":"Inspect must not be called"}`), // does not inspect
			guardSpec("guard", `{}`),
		}, nil)
		got, results, err := h.Inspect(context.Background(), aCall(`{}`), json.RawMessage(`{"content":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		want := `{"content":[{"type":"text","text":"write to [redacted email]"}]}`
		if !jsonEqual(t, got, []byte(want)) {
			t.Errorf("Inspect = %s, want %s", got, want)
		}
		wantResults := []Result{{Plugin: "marker", Effect: Rewrite}, {Plugin: "guard", Effect: Rewrite}}
		if diff := cmp.Diff(wantResults, results, ignoreErr); diff != "" {
			t.Errorf("Results (-want +got):\n%s", diff)
		}
	})
}

func TestPluginFailures(t *testing.T) {
	tests := []struct {
		name   string
		config string
		cause  func(error) bool // of the PluginError
	}{
		{"an error", `{"error":"database down"}`, func(err error) bool { return status.Code(err) == codes.Unknown }},
		{"an invalid effect", `{"effect":"bogus"}`, func(err error) bool { return err != nil }},
		{"a rewrite that is not an object", `{"effect":"rewrite","arguments":[1,2]}`, func(err error) bool { return errors.Is(err, errNotJSONObject) }},
		{"a rewrite without arguments", `{"effect":"rewrite"}`, func(err error) bool { return errors.Is(err, errNotJSONObject) }},
	}
	for _, tt := range tests {
		t.Run(tt.name+" fails closed", func(t *testing.T) {
			h := start(t, []Spec{testSpec("flaky", tt.config), testSpec("after", `{}`)}, nil)
			got, err := h.Decide(context.Background(), aCall(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			reason := `the policy plugin "flaky" is unavailable; try again later`
			want := Outcome{Effect: Deny, Reason: reason, Results: []Result{{Plugin: "flaky", Effect: Deny, Reason: reason}}}
			if diff := cmp.Diff(want, got, ignoreErr); diff != "" {
				t.Errorf("Outcome (-want +got):\n%s", diff)
			}
			checkPluginError(t, got.Results[0].Err, "flaky", tt.cause)
		})
		t.Run(tt.name+" fails open", func(t *testing.T) {
			logs := newRecords()
			spec := testSpec("flaky", tt.config)
			spec.FailOpen = true
			h := start(t, []Spec{spec, testSpec("after", `{}`)}, &Options{Logger: slog.New(logs)})
			got, err := h.Decide(context.Background(), aCall(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			want := Outcome{Effect: Allow, Results: []Result{{Plugin: "flaky", Effect: Allow}, {Plugin: "after", Effect: Allow}}}
			if diff := cmp.Diff(want, got, ignoreErr); diff != "" {
				t.Errorf("Outcome (-want +got):\n%s", diff)
			}
			checkPluginError(t, got.Results[0].Err, "flaky", tt.cause)
			rec, ok := logs.find(slog.LevelWarn, "skipped")
			if !ok || attr(rec, "plugin") != "flaky" {
				t.Errorf("no warning naming the skipped plugin was logged")
			}
		})
	}
}

// checkPluginError fails t unless err is a *PluginError for plugin whose cause satisfies cause.
func checkPluginError(t *testing.T, err error, plugin string, cause func(error) bool) {
	t.Helper()
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Plugin != plugin {
		t.Fatalf("Err = %v, want a *PluginError for %s", err, plugin)
	}
	if !cause(pe.Err) {
		t.Errorf("PluginError cause = %v, not the expected one", pe.Err)
	}
}

func TestInspectFailures(t *testing.T) {
	result := json.RawMessage(`{"content":[{"type":"text","text":"x"}]}`)
	t.Run("fails closed: no result", func(t *testing.T) {
		h := start(t, []Spec{inspecting(testSpec("flaky", `{"error":"boom"}`))}, nil)
		got, results, err := h.Inspect(context.Background(), aCall(`{}`), result)
		var pe *PluginError
		if got != nil || !errors.As(err, &pe) || pe.Plugin != "flaky" {
			t.Fatalf("Inspect = %s, %v; want no result and flaky's PluginError", got, err)
		}
		reason := `the policy plugin "flaky" is unavailable; try again later`
		if diff := cmp.Diff([]Result{{Plugin: "flaky", Effect: Deny, Reason: reason}}, results, ignoreErr); diff != "" {
			t.Errorf("Results (-want +got):\n%s", diff)
		}
	})
	t.Run("fails open: skipped", func(t *testing.T) {
		spec := inspecting(testSpec("flaky", `{"error":"boom"}`))
		spec.FailOpen = true
		h := start(t, []Spec{spec, guardSpec("guard", `{}`)}, nil)
		got, results, err := h.Inspect(context.Background(), aCall(`{}`), result)
		if err != nil || string(got) != string(result) {
			t.Fatalf("Inspect = %s, %v; want the result unchanged", got, err)
		}
		if diff := cmp.Diff([]Result{{Plugin: "flaky", Effect: Allow}, {Plugin: "guard", Effect: Allow}}, results, ignoreErr); diff != "" {
			t.Errorf("Results (-want +got):\n%s", diff)
		}
		if results[0].Err == nil {
			t.Error("the skipped plugin's Result has no Err")
		}
	})
}

func TestTimeout(t *testing.T) {
	hang := testSpec("slow", `{"hang":true}`)
	hang.Timeout = 50 * time.Millisecond
	h := start(t, []Spec{hang}, nil)

	got, err := h.Decide(context.Background(), aCall(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Effect != Deny || !strings.Contains(got.Reason, `"slow" is unavailable`) {
		t.Errorf("Outcome = %+v, want a deny saying slow is unavailable", got)
	}
	checkPluginError(t, got.Results[0].Err, "slow", func(err error) bool { return errors.Is(err, context.DeadlineExceeded) })

	// The process still runs: a timeout is not a crash.
	pid := h.pids()[0]
	if got, _ := h.Decide(context.Background(), aCall(`{}`)); got.Effect != Deny || h.pids()[0] != pid {
		t.Errorf("after a timeout: Outcome %v, pid %d → %d; want the same process, timing out again", got.Effect, pid, h.pids()[0])
	}
}

func TestCallerGivesUp(t *testing.T) {
	hang := testSpec("slow", `{"hang":true}`)
	hang.Timeout = time.Hour
	h := start(t, []Spec{hang}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var got Outcome
	var err error
	go func() {
		defer close(done)
		got, err = h.Decide(ctx, aCall(`{}`))
	}()
	cancel()
	<-done
	if !errors.Is(err, context.Canceled) || got.Effect != Deny {
		t.Errorf("Decide after the caller gave up = %v, %v; want Deny and context.Canceled", got.Effect, err)
	}
}

func TestStartErrors(t *testing.T) {
	t.Run("wrong checksum", func(t *testing.T) {
		wrong := strings.Repeat("ab", 32)
		spec := testSpec("tampered", `{}`)
		spec.SHA256 = wrong
		_, err := Start(context.Background(), []Spec{guardSpec("fine", `{}`), spec}, nil)
		var ce *ChecksumError
		if !errors.As(err, &ce) {
			t.Fatalf("Start = %v, want a *ChecksumError", err)
		}
		want := ChecksumError{Plugin: "tampered", Path: testpluginBin, Want: wrong, Got: testpluginSum}
		if *ce != want {
			t.Errorf("ChecksumError = %+v, want %+v", *ce, want)
		}
		for _, s := range []string{"tampered", wrong, testpluginSum} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %s", err, s)
			}
		}
		if kids := children(); len(kids) > 0 {
			t.Errorf("a failed Start left processes: %v", kids)
		}
	})
	t.Run("missing executable", func(t *testing.T) {
		spec := testSpec("ghost", `{}`)
		spec.Path = t.TempDir() + "/nothing"
		_, err := Start(context.Background(), []Spec{spec}, nil)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "ghost") {
			t.Errorf("Start = %v, want a not-exist error naming ghost", err)
		}
	})
	t.Run("Configure fails", func(t *testing.T) {
		_, err := Start(context.Background(), []Spec{testSpec("picky", `{"fail_configure":"no such region"}`)}, nil)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "picky") || !strings.Contains(err.Error(), "no such region") {
			t.Errorf("Start = %v, want picky's Configure error", err)
		}
		if kids := children(); len(kids) > 0 {
			t.Errorf("a failed Start left processes: %v", kids)
		}
	})
	t.Run("invalid config is refused by the plugin", func(t *testing.T) {
		_, err := Start(context.Background(), []Spec{guardSpec("guard", `{"block":["("]}`)}, nil)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Start = %v, want guard's Configure error", err)
		}
	})
	t.Run("every invalid spec is reported", func(t *testing.T) {
		specs := []Spec{
			{Path: "/x", SHA256: testpluginSum},
			{Name: "a", SHA256: "nothex"},
			{Name: "a", Path: "/x", SHA256: testpluginSum, Config: json.RawMessage(`{`), Timeout: -1},
		}
		_, err := Start(context.Background(), specs, nil)
		if err == nil {
			t.Fatal("Start accepted invalid specs")
		}
		for _, s := range []string{"name is required", "path is required", "64 hex digits", "used by an earlier plugin", "not valid JSON", "negative"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error does not report %q:\n%v", s, err)
			}
		}
	})
}

func TestPluginLogsReachTheLogger(t *testing.T) {
	logs := newRecords()
	start(t, []Spec{testSpec("chatty", `{"effect":"allow"}`)}, &Options{Logger: slog.New(logs)})
	var rec slog.Record
	found := func() bool {
		var ok bool
		rec, ok = logs.find(slog.LevelInfo, "testplugin configured")
		return ok
	}
	testwait.Until(t, 10*time.Second, "the plugin's log record", found)
	if attr(rec, "plugin") != "chatty" || attr(rec, "effect") != "allow" {
		t.Errorf("record %v lacks the plugin's name or its own attributes", rec)
	}
}

func TestDefaultBackoff(t *testing.T) {
	want := map[int]time.Duration{
		1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond,
		7: 6400 * time.Millisecond, 8: 10 * time.Second, 1000: 10 * time.Second,
	}
	for attempt, d := range want {
		if got := defaultBackoff(attempt); got != d {
			t.Errorf("defaultBackoff(%d) = %v, want %v", attempt, got, d)
		}
	}
}
