package credential

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// staticSource gives a fixed header, or a fixed error.
type staticSource struct {
	name, value string
	err         error
}

func (s staticSource) Header(context.Context) (string, string, error) {
	return s.name, s.value, s.err
}

func TestTransportSetsHeaders(t *testing.T) {
	tests := []struct {
		name    string
		sources []Source
		sent    http.Header // on the request before the transport
		want    map[string]string
	}{
		{
			name:    "adds Authorization",
			sources: []Source{staticSource{name: "Authorization", value: "Bearer ours"}},
			want:    map[string]string{"Authorization": "Bearer ours"},
		},
		{
			name:    "replaces the client's Authorization",
			sources: []Source{staticSource{name: "Authorization", value: "Bearer ours"}},
			sent:    http.Header{"Authorization": {"Bearer client-token", "Basic second"}},
			want:    map[string]string{"Authorization": "Bearer ours"},
		},
		{
			name: "several sources, header names canonicalised",
			sources: []Source{
				staticSource{name: "authorization", value: "Bearer ours"},
				staticSource{name: "X-Api-Key", value: "key-1"},
			},
			sent: http.Header{"Authorization": {"Bearer client-token"}, "X-Other": {"kept"}},
			want: map[string]string{"Authorization": "Bearer ours", "X-Api-Key": "key-1", "X-Other": "kept"},
		},
		{
			name: "a later source of the same name wins",
			sources: []Source{
				staticSource{name: "Authorization", value: "Bearer first"},
				staticSource{name: "Authorization", value: "Bearer second"},
			},
			want: map[string]string{"Authorization": "Bearer second"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			up := newRecorder(t)
			sent := tt.sent.Clone()
			if err := up.get(t, Transport(nil, tt.sources...), sent); err != nil {
				t.Fatal(err)
			}
			seen := up.seen()
			if len(seen) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(seen))
			}
			got := map[string]string{}
			for name := range tt.want {
				got[name] = strings.Join(seen[0].Values(name), ",")
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("headers at the upstream (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.sent, sent); diff != "" {
				t.Errorf("the caller's request was modified (-before +after):\n%s", diff)
			}
		})
	}
}

// closeRecorder is a request body that records whether it was closed.
type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

func TestTransportSourceFails(t *testing.T) {
	errSource := errors.New("secret store down")
	tests := []struct {
		name    string
		source  Source
		wantErr error // besides ErrUnavailable
	}{
		{"source error", staticSource{err: errSource}, errSource},
		{"value with a line break", staticSource{name: "Authorization", value: "Bearer s3cret\r\nX-Evil: 1"}, nil},
		{"no header name", staticSource{value: "Bearer s3cret"}, nil},
		{"invalid header name", staticSource{name: "Bad Name", value: "Bearer s3cret"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			up := newRecorder(t)
			body := &closeRecorder{Reader: strings.NewReader("{}")}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, up.srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Transport(nil, tt.source).RoundTrip(req) // directly: http.Client may close the body itself
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("error %v does not wrap ErrUnavailable", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v does not wrap the source's error", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q shows the header value", err)
			}
			if n := len(up.seen()); n != 0 {
				t.Errorf("upstream got %d requests, want none", n)
			}
			if !body.closed.Load() {
				t.Error("request body not closed")
			}
		})
	}
}
