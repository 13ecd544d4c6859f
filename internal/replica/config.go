package replica

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/manifold-mcp/manifold/internal/session"
)

// Kinds of the messages about the replicas' configurations. No configuration text travels:
// each replica reads its own files, which may expand secrets of its own.
const (
	// busReload: read your configuration files again and apply them.
	busReload = "reload"
	// busConfig: the sending replica runs the configuration Data (a Config); Text "ask"
	// asks every replica to say what it runs too.
	busConfig = "config"
)

// Config is what a replica says of the configuration it runs.
type Config struct {
	// Replica names the replica; filled in on receipt.
	Replica string `json:"-"`
	// Version is config.Config.Version of what it runs; Since when it began to.
	Version string    `json:"v"`
	Since   time.Time `json:"s"`
	// LastReload is when a reload was last asked of it; LastError why it was refused, ""
	// when it applied.
	LastReload time.Time `json:"r,omitzero"`
	LastError  string    `json:"e,omitempty"`
}

// configs holds what the other replicas last said of their configurations.
type configs struct {
	mu sync.Mutex
	// byReplica is keyed by replica name; a replica found stopped leaves it. Guarded by mu.
	byReplica map[string]Config
}

func (c *configs) set(cfg Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byReplica == nil {
		c.byReplica = map[string]Config{}
	}
	c.byReplica[cfg.Replica] = cfg
}

func (c *configs) drop(replica string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byReplica, replica)
}

// AnnounceConfig tells the other replicas the configuration this one runs; with ask, it asks
// them to say theirs too (a replica that just started). It never blocks.
func (r *Replicas) AnnounceConfig(cfg Config, ask bool) {
	data, _ := json.Marshal(cfg) // a Config always encodes
	m := &session.BusMessage{Kind: busConfig, Data: data}
	if ask {
		m.Text = "ask"
	}
	r.post(outgoing{msg: m})
}

// ReloadAll asks every other replica to read its configuration files again and apply them.
// It never blocks.
func (r *Replicas) ReloadAll() {
	r.post(outgoing{msg: &session.BusMessage{Kind: busReload}})
}

// Configs returns what the other replicas running now last said of their configurations,
// by replica name.
func (r *Replicas) Configs() []Config {
	r.configs.mu.Lock()
	defer r.configs.mu.Unlock()
	return slices.SortedFunc(maps.Values(r.configs.byReplica), func(a, b Config) int { return strings.Compare(a.Replica, b.Replica) })
}

// receiveConfig handles busReload and busConfig from another replica.
func (r *Replicas) receiveConfig(m *session.BusMessage) {
	if m.From == r.bus.Replica() {
		return
	}
	switch m.Kind {
	case busReload:
		r.opts.Go(r.host.ReloadConfig)
	case busConfig:
		var cfg Config
		if err := json.Unmarshal(m.Data, &cfg); err != nil {
			r.logger.Warn("a replica's configuration message could not be read", "replica", m.From, "error", err.Error())
			return
		}
		cfg.Replica = m.From
		r.configs.set(cfg)
		if m.Text == "ask" {
			r.AnnounceConfig(r.host.RunningConfig(), false)
		}
	}
}
