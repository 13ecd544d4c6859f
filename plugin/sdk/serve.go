package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// stderr is the process's standard error as it was at start: go-plugin's Serve replaces
// os.Stderr with a pipe to its stdio stream, and logs must keep going to the real one, which
// the gateway reads line by line.
var stderr = os.Stderr

// Serve runs p as a Manifold policy plugin: it answers the gateway's handshake on standard
// output, then serves p over gRPC until the gateway stops the plugin, and returns. It is meant
// to be the last call in main. p may also implement [Inspector] and [Configurer].
//
// Started by anything but the Manifold gateway (which sets [MagicCookieKey]), Serve prints a
// notice to standard error and exits the process with status 1.
func Serve(p Plugin) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  ProtocolVersion,
			MagicCookieKey:   MagicCookieKey,
			MagicCookieValue: MagicCookieValue,
		},
		Plugins:    goplugin.PluginSet{"policy": &grpcPlugin{server: newServer(p)}},
		GRPCServer: goplugin.DefaultGRPCServer,
		// go-plugin's own records, in the JSON form the gateway parses; debug and trace ones
		// would only repeat what the gateway logs itself.
		Logger: hclog.New(&hclog.LoggerOptions{Output: stderr, JSONFormat: true, Level: hclog.Info}),
	})
}

// Logger returns a logger whose records reach the gateway's log at their own level, with
// their attributes, attributed to this plugin; records below debug level are dropped. It
// writes to standard error, as JSON lines in the form the gateway reads. It is safe for
// concurrent use.
func Logger() *slog.Logger { return newLogger(stderr) }

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:       slog.LevelDebug,
		ReplaceAttr: hclogAttr,
	}))
}

// hclogAttr renames slog's built-in keys to hclog's (@level, @message) and drops the time,
// which the gateway stamps itself.
func hclogAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) > 0 {
		return a
	}
	switch a.Key {
	case slog.TimeKey:
		return slog.Attr{}
	case slog.MessageKey:
		a.Key = "@message"
	case slog.LevelKey:
		level, _ := a.Value.Any().(slog.Level)
		name, _, _ := strings.Cut(strings.ToLower(level.String()), "+") // "info+2" is info
		a = slog.String("@level", name)
	}
	return a
}

// grpcPlugin is go-plugin's view of the plugin: the server half only, over gRPC only.
type grpcPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	server *server
}

func (g *grpcPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterPolicyPluginServer(s, g.server)
	return nil
}

func (g *grpcPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, fmt.Errorf("the plugin SDK serves plugins; the client is the gateway's")
}

// server translates the wire contract to the Go API and back.
type server struct {
	pluginpb.UnimplementedPolicyPluginServer
	plugin     Plugin
	inspector  Inspector  // nil unless plugin is an Inspector
	configurer Configurer // nil unless plugin is a Configurer
	logger     *slog.Logger
}

func newServer(p Plugin) *server {
	s := &server{plugin: p, logger: Logger()}
	s.inspector, _ = p.(Inspector)
	s.configurer, _ = p.(Configurer)
	return s
}

func (s *server) Configure(_ context.Context, req *pluginpb.ConfigureRequest) (resp *pluginpb.ConfigureResponse, err error) {
	defer s.recoverPanic("Configure", &err)
	if s.configurer != nil {
		config := json.RawMessage(req.GetConfigJson())
		if len(config) == 0 {
			config = json.RawMessage("null")
		}
		if err := s.configurer.Configure(config); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "configure: %v", err)
		}
	}
	return &pluginpb.ConfigureResponse{Inspects: s.inspector != nil}, nil
}

func (s *server) Decide(ctx context.Context, pc *pluginpb.Call) (resp *pluginpb.Decision, err error) {
	defer s.recoverPanic("Decide", &err)
	d, err := s.plugin.Decide(ctx, callFromWire(pc))
	if err != nil {
		return nil, callError(ctx, "decide", err)
	}
	if d == nil {
		return nil, status.Error(codes.Internal, "decide: the plugin returned no decision")
	}
	return &pluginpb.Decision{
		Effect:        pluginpb.Effect(d.Effect),
		Reason:        d.Reason,
		ArgumentsJson: d.Arguments,
	}, nil
}

func (s *server) Inspect(ctx context.Context, r *pluginpb.Result) (resp *pluginpb.Result, err error) {
	if s.inspector == nil {
		return nil, status.Error(codes.Unimplemented, "inspect: the plugin does not inspect results")
	}
	defer s.recoverPanic("Inspect", &err)
	out, err := s.inspector.Inspect(ctx, callFromWire(r.GetCall()), r.GetResultJson())
	if err != nil {
		return nil, callError(ctx, "inspect", err)
	}
	if bytes.Equal(out, r.GetResultJson()) {
		out = nil // unchanged: spare the copy back
	}
	return &pluginpb.Result{ResultJson: out}, nil
}

// callError is the status for the plugin's error err: the deadline's or the cancellation's
// when ctx ended (the plugin gave up because the gateway did), Unknown with err's text if not.
func callError(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unknown, "%s: %v", method, err)
}

// recoverPanic turns a panic in the plugin's code into an error for that one call, so that a
// bug hit by one call's input does not cost the process (and every call in flight with it).
func (s *server) recoverPanic(method string, err *error) {
	if r := recover(); r != nil {
		s.logger.Error("panic in plugin", "method", method, "panic", fmt.Sprint(r))
		*err = status.Errorf(codes.Internal, "%s: panic: %v", strings.ToLower(method), r)
	}
}

func callFromWire(pc *pluginpb.Call) *Call {
	p := pc.GetPrincipal()
	return &Call{
		Principal: Principal{
			Issuer:  p.GetIssuer(),
			Subject: p.GetSubject(),
			Email:   p.GetEmail(),
			Groups:  p.GetGroups(),
			Roles:   p.GetRoles(),
			Scopes:  p.GetScopes(),
		},
		Session:     Session{Fingerprint: pc.GetSession().GetFingerprint()},
		Upstream:    pc.GetUpstream(),
		Method:      pc.GetMethod(),
		Target:      pc.GetTarget(),
		Exposed:     pc.GetExposed(),
		Arguments:   pc.GetArgumentsJson(),
		Annotations: pc.GetAnnotationsJson(),
	}
}

// Interface guards.
var (
	_ goplugin.GRPCPlugin         = (*grpcPlugin)(nil)
	_ pluginpb.PolicyPluginServer = (*server)(nil)
)
