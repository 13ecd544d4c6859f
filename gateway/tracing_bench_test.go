package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/manifold-mcp/manifold/internal/tracing"
)

// BenchmarkCallToolTracing is BenchmarkCallToolThroughHandler with tracing off, on with every
// trace recorded (exported to an OTLP/HTTP receiver on 127.0.0.1 that drops what it gets),
// and on with none recorded (sample_ratio 0): what traces add to a call.
func BenchmarkCallToolTracing(b *testing.B) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer receiver.Close()
	for _, bc := range []struct {
		name  string
		ratio float64
		on    bool
	}{
		{"off", 0, false},
		{"on", 1, true},
		{"on_unsampled", 0, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var tracer *tracing.Tracer
			if bc.on {
				var err error
				if tracer, err = tracing.New(&tracing.Options{Endpoint: receiver.URL, SampleRatio: bc.ratio}); err != nil {
					b.Fatal(err)
				}
				defer func() { _ = tracer.Shutdown(context.Background()) }()
			}
			benchCallTool(b, benchGatewayOpts(b, 20, 100, "", &Options{Tracer: tracer}))
		})
	}
}
