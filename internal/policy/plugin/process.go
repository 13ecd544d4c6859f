package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/manifold-mcp/manifold/plugin/sdk"
	"github.com/manifold-mcp/manifold/policy/pluginpb"
)

// dispenseName is the plugin's name in go-plugin's PluginSet. It never crosses the wire (in
// gRPC mode the server registers its services by their proto names), so it is the host's
// alone.
const dispenseName = "policy"

// grpcClientPlugin is go-plugin's view of a policy plugin from the host: the client half only,
// over gRPC only.
type grpcClientPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

var _ goplugin.GRPCPlugin = grpcClientPlugin{}

func (grpcClientPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("the host does not serve policy plugins")
}

func (grpcClientPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return conn, nil
}

// running is one started process of a plugin. Its fields are set at start and not changed.
type running struct {
	client   *goplugin.Client
	conn     *grpc.ClientConn
	rpc      pluginpb.PolicyPluginClient
	inspects bool
	pid      int
}

// process runs one plugin: it starts its executable, calls it, and stops it. The Host's
// supervisor restarts it (supervise.go). Safe for concurrent use.
type process struct {
	spec     Spec   // a copy, with defaults applied; not modified after newProcess
	checksum []byte // spec.SHA256 decoded
	logger   *slog.Logger
	opts     *Options // the Host's copy, with defaults applied; not modified

	// kick wakes the supervisor early to check the process: a call just failed. Capacity 1:
	// kicks while one is pending coalesce.
	kick chan struct{}

	mu sync.RWMutex
	// cur is the running process, nil while it is down (crashed, being restarted, or
	// closed). Guarded by mu.
	cur *running
	// inspects is what the plugin declared when last configured; it outlives a crash, so
	// that Inspect can fail per the plugin's failure mode while it is down. Guarded by mu.
	inspects bool
	// closed is set by close; a start that finishes after it stops its own process. Guarded
	// by mu.
	closed bool
}

func newProcess(spec Spec, checksum []byte, opts *Options) *process {
	return &process{
		spec:     spec,
		checksum: checksum,
		logger:   opts.Logger.With("plugin", spec.Name),
		opts:     opts,
		kick:     make(chan struct{}, 1),
	}
}

// start launches the executable after checking its checksum, and configures the plugin.
func (p *process) start(ctx context.Context) error {
	if err := p.verify(); err != nil {
		return err
	}
	cmd := exec.Command(p.spec.Path)
	// The plugin gets only the environment its Spec lists (go-plugin adds its handshake
	// variables): the gateway's own holds its secrets.
	cmd.Env = append([]string(nil), p.spec.Env...)
	setProcAttr(cmd)
	hclogger := &hclogger{logger: p.logger}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{
			ProtocolVersion:  sdk.ProtocolVersion,
			MagicCookieKey:   sdk.MagicCookieKey,
			MagicCookieValue: sdk.MagicCookieValue,
		},
		Plugins:          goplugin.PluginSet{dispenseName: grpcClientPlugin{}},
		Cmd:              cmd,
		SkipHostEnv:      true,
		SecureConfig:     &goplugin.SecureConfig{Checksum: p.checksum, Hash: sha256.New()},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     p.opts.StartTimeout,
		Logger:           hclogger,
		SyncStdout:       &lineLogger{logger: p.logger, stream: "stdout"},
		SyncStderr:       &lineLogger{logger: p.logger, stream: "stderr"},
	})
	r, err := p.connect(ctx, client)
	if err != nil {
		client.Kill()
		return fmt.Errorf("start policy plugin %s: %w", p.spec.Name, err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Kill()
		return fmt.Errorf("start policy plugin %s: %w", p.spec.Name, ErrNotRunning)
	}
	p.cur, p.inspects = r, r.inspects
	p.mu.Unlock()
	p.logger.Info("policy plugin started", "pid", r.pid, "inspects", r.inspects)
	return nil
}

// verify checks the executable's checksum, to report both checksums when they differ (go-plugin
// checks it again right before it runs the file, and says only that they differ).
func (p *process) verify() error {
	f, err := os.Open(p.spec.Path)
	if err != nil {
		return fmt.Errorf("policy plugin %s: %w", p.spec.Name, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("policy plugin %s: read %s: %w", p.spec.Name, p.spec.Path, err)
	}
	if got := h.Sum(nil); string(got) != string(p.checksum) {
		return &ChecksumError{Plugin: p.spec.Name, Path: p.spec.Path, Want: hex.EncodeToString(p.checksum), Got: hex.EncodeToString(got)}
	}
	return nil
}

// connect completes client's start: the handshake, the gRPC connection, Configure.
func (p *process) connect(ctx context.Context, client *goplugin.Client) (*running, error) {
	proto, err := client.Client()
	if err != nil {
		return nil, err
	}
	raw, err := proto.Dispense(dispenseName)
	if err != nil {
		return nil, err
	}
	conn := raw.(*grpc.ClientConn)
	r := &running{client: client, conn: conn, rpc: pluginpb.NewPolicyPluginClient(conn)}
	if rc := client.ReattachConfig(); rc != nil {
		r.pid = rc.Pid
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	resp, err := r.rpc.Configure(cctx, &pluginpb.ConfigureRequest{ConfigJson: p.spec.Config})
	if err != nil {
		return nil, fmt.Errorf("configure: %w", err)
	}
	r.inspects = resp.GetInspects()
	return r, nil
}

// current returns the running process, or nil while the plugin is down.
func (p *process) current() *running {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cur
}

// declaresInspect reports whether the plugin said, when last configured, that it inspects.
func (p *process) declaresInspect() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.inspects
}

// stop kills r, the process as it was when found unhealthy, unless it was already replaced,
// and waits for it to end.
func (p *process) stop(r *running) {
	p.mu.Lock()
	if p.cur == r {
		p.cur = nil
	}
	p.mu.Unlock()
	r.client.Kill()
}

// close stops the plugin for good and waits for its process to end.
func (p *process) close() {
	p.mu.Lock()
	r := p.cur
	p.cur, p.closed = nil, true
	p.mu.Unlock()
	if r != nil {
		r.client.Kill()
	}
}

// healthy reports whether r still runs and answers go-plugin's health check.
func (p *process) healthy(ctx context.Context, r *running) bool {
	if r.client.Exited() {
		return false
	}
	hctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	_, err := grpc_health_v1.NewHealthClient(r.conn).Check(hctx, &grpc_health_v1.HealthCheckRequest{Service: goplugin.GRPCServiceName})
	return err == nil || ctx.Err() != nil // a check cut short by Close proves nothing
}

// invoke runs one RPC on the running process within the plugin's Timeout. Its error is the
// parent ctx's when that ended first (the caller gave up, not the plugin), and otherwise a
// *PluginError.
func invoke[Req, Resp any](ctx context.Context, p *process, req Req, rpc func(pluginpb.PolicyPluginClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var zero Resp
	r := p.current()
	if r == nil {
		return zero, &PluginError{Plugin: p.spec.Name, Err: ErrNotRunning}
	}
	cctx, cancel := context.WithTimeout(ctx, p.spec.Timeout)
	defer cancel()
	resp, err := rpc(r.rpc, cctx, req)
	if err == nil {
		return resp, nil
	}
	if ctx.Err() != nil {
		return zero, ctx.Err()
	}
	// The plugin may see its deadline (sent along by gRPC) a moment before the Host does.
	if cctx.Err() != nil || status.Code(err) == codes.DeadlineExceeded {
		err = fmt.Errorf("no answer within %s: %w", p.spec.Timeout, context.DeadlineExceeded)
	}
	p.nudge()
	return zero, &PluginError{Plugin: p.spec.Name, Err: err}
}

// nudge asks the supervisor to check the process now.
func (p *process) nudge() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// pid returns the running process's id, or 0 while it is down.
func (p *process) pid() int {
	if r := p.current(); r != nil {
		return r.pid
	}
	return 0
}

// defaultTimeout is a call's bound when Spec.Timeout is zero.
const defaultTimeout = time.Second
