package hub

import (
	"bytes"
	"slices"
	"time"
)

// keptMessages are the messages for a session's standalone stream that reached this hub while
// it follows the stream from another (Keep): those that hub never logged go on the stream if
// this hub takes it over. Their stream's mu guards them.
type keptMessages struct {
	// msgs are the messages kept, oldest first; size is their bytes.
	msgs []keptMessage
	size int
	// loggedFirst notes the events logged before their message reached this hub.
	loggedFirst []loggedFirst
}

// keptMessage is a message kept for a followed standalone stream (Keep).
type keptMessage struct {
	data []byte
	at   time.Time
}

// loggedFirst is an event of a followed standalone stream that came (Extend) before its
// message (Keep): the digest of its data, and when it came.
type loggedFirst struct {
	digest uint64
	at     time.Time
}

// loggedFirstWindow is how long an event of a followed standalone stream that came before
// any message equal to it is taken for the event of such a message still to come (Keep): the
// time for that message to reach this hub by the bus, which a read of the log can outrun.
// A message that comes later is another one, with the same bytes (a list_changed is the same
// on every replica): it is kept. Short, so that the producer's own messages do not cancel this
// hub's.
const loggedFirstWindow = 5 * time.Second

// keep keeps a message of hub h, unless its event came first; past limits, the oldest go.
func (k *keptMessages) keep(data []byte, h *Local, limits Limits) {
	now := h.opts.Now()
	k.prune(now, h.opts.Hold)
	d := h.digest(data)
	for i, l := range k.loggedFirst {
		if l.digest == d {
			// Its event came first: the producer had it.
			k.loggedFirst = slices.Delete(k.loggedFirst, i, i+1)
			return
		}
	}
	k.msgs = append(k.msgs, keptMessage{data: data, at: now})
	k.size += len(data)
	for len(k.msgs) > 1 && (len(k.msgs) > limits.Messages || k.size > limits.Bytes) {
		k.size -= len(k.msgs[0].data)
		k.msgs[0] = keptMessage{}
		k.msgs = k.msgs[1:]
	}
}

// prune forgets the messages kept longer than hold before now (the producer, which ran, had
// them), and the events noted as logged first longer than loggedFirstWindow (their messages
// would have come).
func (k *keptMessages) prune(now time.Time, hold time.Duration) {
	cutoff := now.Add(-hold)
	i := 0
	for i < len(k.msgs) && k.msgs[i].at.Before(cutoff) {
		k.size -= len(k.msgs[i].data)
		i++
	}
	k.msgs = k.msgs[i:]
	i = 0
	cutoff = now.Add(-min(loggedFirstWindow, hold))
	for i < len(k.loggedFirst) && k.loggedFirst[i].at.Before(cutoff) {
		i++
	}
	k.loggedFirst = k.loggedFirst[i:]
	if len(k.msgs) == 0 {
		k.msgs, k.size = nil, 0
	}
	if len(k.loggedFirst) == 0 {
		k.loggedFirst = nil
	}
}

// forget forgets one kept message equal to an event its producer logged; when none is kept,
// the event is noted (at most limit of them), for its message may come after it (Keep): the
// bus does not order the producer's events after the messages of other replicas.
func (k *keptMessages) forget(data []byte, h *Local, limit int) {
	for i, m := range k.msgs {
		if bytes.Equal(m.data, data) {
			k.size -= len(m.data)
			k.msgs = slices.Delete(k.msgs, i, i+1)
			return
		}
	}
	k.loggedFirst = append(k.loggedFirst, loggedFirst{digest: h.digest(data), at: h.opts.Now()})
	if len(k.loggedFirst) > limit {
		k.loggedFirst = slices.Delete(k.loggedFirst, 0, len(k.loggedFirst)-limit)
	}
}

// prepend puts the messages kept (and the events noted as logged first) on a copy that this
// one replaces before its own.
func (k *keptMessages) prepend(msgs []keptMessage, logged []loggedFirst) {
	k.msgs = append(slices.Clip(msgs), k.msgs...)
	k.loggedFirst = append(slices.Clip(logged), k.loggedFirst...)
	k.size = 0
	for _, m := range k.msgs {
		k.size += len(m.data)
	}
}
