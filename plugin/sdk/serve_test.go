package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// fake is a Plugin that records what it is given and answers what it is told.
type fake struct {
	config   json.RawMessage
	call     *Call
	decision *Decision
	err      error
	panics   bool
}

func (f *fake) Decide(ctx context.Context, call *Call) (*Decision, error) {
	f.call = call
	if f.panics {
		panic("boom")
	}
	return f.decision, f.err
}

type fakeConfigurer struct {
	*fake
	err error
}

func (f *fakeConfigurer) Configure(config json.RawMessage) error {
	f.config = config
	return f.err
}

type fakeInspector struct {
	*fake
	out json.RawMessage
}

func (f *fakeInspector) Inspect(_ context.Context, call *Call, result json.RawMessage) (json.RawMessage, error) {
	f.call = call
	if f.out == nil {
		return result, f.err
	}
	return f.out, f.err
}

var (
	_ Configurer = (*fakeConfigurer)(nil)
	_ Inspector  = (*fakeInspector)(nil)
)

var wireCall = &pluginpb.Call{
	Principal: &pluginpb.Principal{Issuer: "iss", Subject: "sub", Email: "a@example.com",
		Groups: []string{"g"}, Roles: []string{"r"}, Scopes: []string{"s"}},
	Session:         &pluginpb.Session{Fingerprint: "fp"},
	Upstream:        "up",
	Method:          "tools/call",
	Target:          "search",
	Exposed:         "up__search",
	ArgumentsJson:   []byte(`{"q":"go"}`),
	AnnotationsJson: []byte(`{"readOnlyHint":true}`),
}

var goCall = &Call{
	Principal: Principal{Issuer: "iss", Subject: "sub", Email: "a@example.com",
		Groups: []string{"g"}, Roles: []string{"r"}, Scopes: []string{"s"}},
	Session:     Session{Fingerprint: "fp"},
	Upstream:    "up",
	Method:      "tools/call",
	Target:      "search",
	Exposed:     "up__search",
	Arguments:   json.RawMessage(`{"q":"go"}`),
	Annotations: json.RawMessage(`{"readOnlyHint":true}`),
}

func TestConfigure(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name         string
		plugin       Plugin
		config       string
		wantConfig   string
		wantInspects bool
		wantCode     codes.Code
	}{
		{"config handed over", &fakeConfigurer{fake: &fake{}}, `{"a":1}`, `{"a":1}`, false, codes.OK},
		{"no config is null", &fakeConfigurer{fake: &fake{}}, ``, `null`, false, codes.OK},
		{"a Configure error fails", &fakeConfigurer{fake: &fake{}, err: errors.New("bad region")}, `{}`, `{}`, false, codes.InvalidArgument},
		{"an Inspector says so", &fakeInspector{fake: &fake{}}, `{}`, ``, true, codes.OK},
		{"a plain Plugin needs no config", &fake{}, `{"ignored":true}`, ``, false, codes.OK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := newServer(tt.plugin).Configure(ctx, &pluginpb.ConfigureRequest{ConfigJson: []byte(tt.config)})
			if status.Code(err) != tt.wantCode {
				t.Fatalf("Configure error = %v, want code %v", err, tt.wantCode)
			}
			if c, ok := tt.plugin.(*fakeConfigurer); ok && string(c.config) != tt.wantConfig {
				t.Errorf("Configure got %q, want %q", c.config, tt.wantConfig)
			}
			if err == nil && resp.GetInspects() != tt.wantInspects {
				t.Errorf("inspects = %v, want %v", resp.GetInspects(), tt.wantInspects)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name     string
		decision *Decision
		err      error
		panics   bool
		want     *pluginpb.Decision
		wantCode codes.Code
	}{
		{"allow", Allow(), nil, false, &pluginpb.Decision{Effect: pluginpb.Effect_EFFECT_ALLOW}, codes.OK},
		{"deny", Deny("no"), nil, false, &pluginpb.Decision{Effect: pluginpb.Effect_EFFECT_DENY, Reason: "no"}, codes.OK},
		{"require approval", RequireApproval("ask"), nil, false, &pluginpb.Decision{Effect: pluginpb.Effect_EFFECT_REQUIRE_APPROVAL, Reason: "ask"}, codes.OK},
		{"rewrite", Rewrite(json.RawMessage(`{"q":"rust"}`)), nil, false, &pluginpb.Decision{Effect: pluginpb.Effect_EFFECT_REWRITE, ArgumentsJson: []byte(`{"q":"rust"}`)}, codes.OK},
		{"an error", nil, errors.New("db down"), false, nil, codes.Unknown},
		{"no decision", nil, nil, false, nil, codes.Internal},
		{"a panic", nil, nil, true, nil, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{decision: tt.decision, err: tt.err, panics: tt.panics}
			s := newServer(f)
			var log bytes.Buffer
			s.logger = newLogger(&log)
			got, err := s.Decide(context.Background(), wireCall)
			if status.Code(err) != tt.wantCode {
				t.Fatalf("Decide error = %v, want code %v", err, tt.wantCode)
			}
			if !proto.Equal(got, tt.want) {
				t.Errorf("Decide = %v, want %v", got, tt.want)
			}
			if diff := cmp.Diff(goCall, f.call); diff != "" {
				t.Errorf("the plugin saw (-want +got):\n%s", diff)
			}
			if tt.panics && !strings.Contains(log.String(), `"panic":"boom"`) {
				t.Errorf("the panic was not logged: %q", log.String())
			}
		})
	}
}

func TestErrorAfterTheGatewayGaveUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	<-ctx.Done()
	_, err := newServer(&fake{err: ctx.Err()}).Decide(ctx, wireCall)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Decide error = %v, want DeadlineExceeded", err)
	}
}

func TestInspect(t *testing.T) {
	ctx := context.Background()
	in := &pluginpb.Result{Call: wireCall, ResultJson: []byte(`{"content":[]}`)}

	if _, err := newServer(&fake{}).Inspect(ctx, in); status.Code(err) != codes.Unimplemented {
		t.Errorf("Inspect on a plugin that does not inspect: %v, want Unimplemented", err)
	}

	unchanged := &fakeInspector{fake: &fake{}}
	got, err := newServer(unchanged).Inspect(ctx, in)
	if err != nil || len(got.GetResultJson()) != 0 {
		t.Errorf("Inspect passing the result on = %v, %v; want an empty result_json", got, err)
	}
	if diff := cmp.Diff(goCall, unchanged.call); diff != "" {
		t.Errorf("the plugin saw (-want +got):\n%s", diff)
	}

	changed := &fakeInspector{fake: &fake{}, out: json.RawMessage(`{"content":[{"type":"text","text":"x"}]}`)}
	got, err = newServer(changed).Inspect(ctx, in)
	if err != nil || string(got.GetResultJson()) != string(changed.out) {
		t.Errorf("Inspect rewriting = %v, %v; want the new result", got, err)
	}

	failing := &fakeInspector{fake: &fake{err: errors.New("scanner down")}}
	if _, err := newServer(failing).Inspect(ctx, in); status.Code(err) != codes.Unknown {
		t.Errorf("Inspect failing: %v, want Unknown", err)
	}
}

// TestEffectsMatchTheWire: the Go effects are numbered as policy.proto's.
func TestEffectsMatchTheWire(t *testing.T) {
	for _, e := range []Effect{EffectAllow, EffectDeny, EffectRequireApproval, EffectRewrite} {
		if got, want := pluginpb.Effect(e).String(), "EFFECT_"+strings.ToUpper(e.String()); got != want {
			t.Errorf("Effect %d is %s on the wire, want %s", e, got, want)
		}
	}
	if Effect(0).String() != "invalid" {
		t.Error("the zero Effect is valid")
	}
}

// TestLoggerWritesHCLogJSON: the Logger's lines are in the form go-plugin parses on the
// gateway's side (hclog's JSON: @level, @message, then the attributes).
func TestLoggerWritesHCLogJSON(t *testing.T) {
	var buf bytes.Buffer
	l := newLogger(&buf)
	l.Warn("disk almost full", "free_mb", 12)
	l.Log(context.Background(), slog.LevelDebug-4, "dropped: below debug")
	l.Debug("detail")
	l.Log(context.Background(), 2, "info plus")
	var got []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, m)
	}
	want := []map[string]any{
		{"@level": "warn", "@message": "disk almost full", "free_mb": float64(12)},
		{"@level": "debug", "@message": "detail"},
		{"@level": "info", "@message": "info plus"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}
