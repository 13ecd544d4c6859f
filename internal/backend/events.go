package backend

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
)

// redisEvents is the Redis event log as the hub uses it.
type redisEvents struct{ log *session.RedisEventLog }

func (r redisEvents) Append(sessionID, streamID string, events []hub.Event, complete bool) {
	r.log.Append(sessionID, streamID, loggedEvents(events), complete)
}

func (r redisEvents) AppendWait(ctx context.Context, sessionID, streamID string, events []hub.Event, complete bool) error {
	return r.log.AppendWait(ctx, sessionID, streamID, loggedEvents(events), complete)
}

// loggedEvents is events as the Redis log takes them.
func loggedEvents(events []hub.Event) []session.LoggedEvent {
	logged := make([]session.LoggedEvent, len(events))
	for i, e := range events {
		logged[i] = session.LoggedEvent{Seq: e.Seq, Data: e.Data}
	}
	return logged
}

func (r redisEvents) Start(sessionID, streamID string, requests []protocol.ID, standalone bool) {
	if standalone {
		r.log.StartStandalone(sessionID, streamID)
		return
	}
	var ids json.RawMessage
	if len(requests) > 0 {
		ids, _ = json.Marshal(requests)
	}
	r.log.Start(sessionID, streamID, ids)
}

func (r redisEvents) Claim(ctx context.Context, sessionID, streamID, from, to string) (string, error) {
	owner, err := r.log.Claim(ctx, sessionID, streamID, from, to)
	if errors.Is(err, session.ErrStreamReplaced) {
		return "", hub.ErrStreamDone
	}
	return owner, err
}

func (r redisEvents) Touch(sessionID, streamID string) { r.log.Touch(sessionID, streamID) }

func (r redisEvents) Replay(ctx context.Context, sessionID, streamID string, after uint64) (*hub.Replayed, error) {
	logged, err := r.log.Replay(ctx, sessionID, streamID, after)
	switch {
	case errors.Is(err, session.ErrEventsLost):
		return nil, hub.ErrEventsLost
	case err != nil:
		return nil, err
	case logged == nil:
		return nil, nil
	}
	replayed := &hub.Replayed{Events: make([]hub.Event, len(logged.Events)), Complete: logged.Complete, More: logged.More,
		Standalone: logged.Standalone, Producer: logged.Producer}
	for i, e := range logged.Events {
		replayed.Events[i] = hub.Event{Seq: e.Seq, Data: e.Data}
	}
	if logged.Requests != nil {
		if err := json.Unmarshal(logged.Requests, &replayed.Requests); err != nil {
			replayed.Requests = nil
		}
	}
	return replayed, nil
}

var _ EventLog = redisEvents{}
