package gateway

import (
	"log/slog"
	"sync"
	"testing"
)

// TestTakeGetsRulesAndPluginsOfOneReload: a request takes the policy's rules and plugins
// together, and a reload swaps both at once, so that no request is decided by a reload's
// rules and the plugins before it (a rule moved into a plugin would then be in neither).
// Requests take while reloads replace both; each take must see a matching pair.
func TestTakeGetsRulesAndPluginsOfOneReload(t *testing.T) {
	gt := &gate{}
	gen := func(n int) (*gateRules, *pluginsInForce) {
		return &gateRules{dryRun: n%2 == 1}, &pluginsInForce{}
	}
	rules0, plugins0 := gen(0)
	gt.rules.Store(rules0)
	s := &pluginSet{cur: plugins0, goWorker: func(func()) bool { return true }, logger: slog.New(slog.DiscardHandler)}
	var mu sync.Mutex
	pairs := map[*pluginsInForce]*gateRules{plugins0: rules0} // each set with the rules it came with
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				in, rules, leave := s.take(gt)
				mu.Lock()
				want := pairs[in]
				mu.Unlock()
				leave()
				if rules != want {
					t.Errorf("a request took the rules of one reload with the plugins of another")
					return
				}
			}
		})
	}
	for n := 1; n <= 2000; n++ {
		rules, plugins := gen(n)
		mu.Lock()
		pairs[plugins] = rules
		mu.Unlock()
		s.replace(plugins, func() { gt.rules.Store(rules) })
	}
	close(stop)
	wg.Wait()
}
