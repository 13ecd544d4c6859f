package credential

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestLifetimeEndsFetchesInFlight: a token request runs detached from the caller that
// started it, but not from its owner: when the Lifetime ends, the request in flight ends too,
// for both kinds of source.
func TestLifetimeEndsFetchesInFlight(t *testing.T) {
	checkGoroutines(t)
	arrived, ended := make(chan struct{}, 2), make(chan struct{}, 2)
	as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a client that leaves once the body is read
		arrived <- struct{}{}
		<-r.Context().Done() // never answers: only the client can end the request
		ended <- struct{}{}
	}))
	defer as.Close()
	for name, source := range map[string]func(context.Context) Source{
		"client credentials": func(life context.Context) Source {
			return ClientCredentials(ClientCredentialsConfig{TokenURL: as.URL, ClientID: "c", ClientSecret: "s", Lifetime: life, HTTPClient: &http.Client{}})
		},
		"token exchange": func(life context.Context) Source {
			e := NewExchanger(ExchangeConfig{TokenURL: as.URL, ClientID: "c", ClientSecret: "s", Lifetime: life, HTTPClient: &http.Client{}})
			e.Remember(alice, "alice-subject", time.Now().Add(time.Hour))
			return e.For(alice)
		},
	} {
		t.Run(name, func(t *testing.T) {
			life, stop := context.WithCancel(context.Background())
			caller, give := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, _, err := source(life).Header(caller); done <- err }()
			select {
			case <-arrived:
			case err := <-done:
				t.Fatalf("Header ended before its request arrived: %v", err)
			}
			give() // the caller gives up: the request goes on for other waiters
			if err := <-done; err == nil {
				t.Fatal("Header succeeded without a token")
			}
			select {
			case <-ended:
				t.Fatal("the request ended with its caller, not with its owner")
			default:
			}
			stop() // the owner stops: the request ends (well before its own 30 s timeout)
			select {
			case <-ended:
			case <-time.After(10 * time.Second):
				t.Fatal("the request still runs after its owner stopped")
			}
		})
	}
}
