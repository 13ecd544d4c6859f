package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// receiver is a local OTLP/HTTP trace receiver on a loopback port, for the gateway-observed
// target: it takes every export (POST /v1/traces), reads it whole and answers 200, as a
// collector would, counting the bytes; close stops it.
type receiver struct {
	url   string
	bytes atomic.Int64
	srv   *http.Server
	done  chan struct{} // closed when srv.Serve returns
}

// startReceiver starts a receiver on a free loopback port.
func startReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rc := &receiver{url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		rc.bytes.Add(n)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	rc.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(rc.done)
		_ = rc.srv.Serve(ln)
	}()
	return rc, nil
}

// close stops the receiver, waiting a little for exports in flight.
func (rc *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rc.srv.Shutdown(ctx); err != nil {
		_ = rc.srv.Close()
	}
	<-rc.done
}

// observedGateway starts a gateway over the stdio echo upstream, like gateway-stdio, with
// everything an operator watches it with on: Prometheus metrics recorded (on a listener of
// their own, not scraped) and every request traced (sample_ratio 1) to a local receiver,
// started here. closeReceiver stops the receiver.
func (f *fleet) observedGateway(bin, echo string, floor []string) (t target, closeReceiver func(), err error) {
	rc, err := startReceiver()
	if err != nil {
		return target{}, nil, err
	}
	settings := fmt.Sprintf("metrics: {listen: 127.0.0.1:0}\ntracing: {endpoint: %q, sample_ratio: 1}\n", rc.url)
	url, err := f.gateway(bin, "observed", settings, fmt.Sprintf("  - name: echo\n    prefix: \"\"\n    command: %q\n", echo))
	if err != nil {
		rc.close()
		return target{}, nil, err
	}
	return target{name: "gateway-observed", url: url, floor: floor, versus: "gateway-stdio"}, rc.close, nil
}
