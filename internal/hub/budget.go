package hub

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// budget bounds the bytes of events the hub's streams hold together (Options.Budget). The
// streams open (a connection writes them, or they await responses) are never evicted for it:
// each is bounded by its own Limits already, and a session's number of streams by
// MaxStreams. Past the budget, the streams kept for resumption only (complete, no connection)
// are evicted, the one whose retention ends first first, until the hub is within it again or
// none is left: a stream evicted is forgotten as one kept past its retention is, and a client
// that resumes it is answered the same. When the open streams alone are over the budget, every
// stream is evicted as soon as it is kept for resumption only, until they shrink.
//
// Must not be copied.
type budget struct {
	// limit is the budget in bytes; 0: none.
	limit int64
	// used is the bytes held by the streams in the hub's sessions (Stream.inHub).
	used atomic.Int64

	// mu guards retained. It is a leaf: taken under a stream's mu, nothing is locked under it.
	mu sync.Mutex
	// retained holds the streams kept for resumption only, with when their retention ends.
	retained map[*Stream]time.Time
}

// retain notes that st is kept for resumption only until until (zero: it is not any more).
func (b *budget) retain(st *Stream, until time.Time) {
	if b.limit <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if until.IsZero() {
		delete(b.retained, st)
		return
	}
	if b.retained == nil {
		b.retained = map[*Stream]time.Time{}
	}
	b.retained[st] = until
}

// over reports whether the hub holds more than its budget.
func (b *budget) over() bool { return b.limit > 0 && b.used.Load() > b.limit }

// evictable returns the streams kept for resumption only, the one whose retention ends first
// first.
func (b *budget) evictable() []*Stream {
	b.mu.Lock()
	defer b.mu.Unlock()
	type kept struct {
		st    *Stream
		until time.Time
	}
	all := make([]kept, 0, len(b.retained))
	for st, until := range b.retained {
		all = append(all, kept{st, until})
	}
	slices.SortFunc(all, func(a, b kept) int {
		if c := a.until.Compare(b.until); c != 0 {
			return c
		}
		return cmp.Compare(a.st.id, b.st.id)
	})
	out := make([]*Stream, len(all))
	for i, k := range all {
		out[i] = k.st
	}
	return out
}

// enforceBudget evicts streams kept for resumption only, the one whose retention ends first
// first, while the hub is over its budget. It must be called with no lock held.
func (h *Local) enforceBudget() {
	if !h.budget.over() {
		return
	}
	for _, st := range h.budget.evictable() {
		if !h.budget.over() {
			return
		}
		evict(st)
	}
}

// HeldBytes returns the bytes of events the hub's streams hold, as its budget counts them.
func (h *Local) HeldBytes() int64 { return h.budget.used.Load() }

// evict forgets st, if it is still kept for resumption only.
func evict(st *Stream) {
	s := st.session
	s.mu.Lock()
	defer s.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if s.streams[st.id] != st || st.writer != nil || st.keepUntil.IsZero() {
		return
	}
	delete(s.streams, st.id)
	st.session.hub.budget.release(st)
}

// share is what the budget counts of one stream. Its stream's mu guards it.
type share struct {
	// in is set while the stream is in its session's streams and counted; counted is its
	// size when last counted.
	in      bool
	counted int
}

// enter counts st, now in its session's streams. st.mu must be held.
func (b *budget) enter(st *Stream) {
	st.share.in = true
	b.account(st)
	b.retain(st, st.keepUntil)
}

// account brings the count of the bytes held up to date with st's. st.mu must be held.
func (b *budget) account(st *Stream) {
	if !st.share.in {
		return
	}
	if d := st.size - st.share.counted; d != 0 {
		b.used.Add(int64(d))
		st.share.counted = st.size
	}
}

// release takes st, gone from its session's streams (or dropped), off the count. st.mu must
// be held.
func (b *budget) release(st *Stream) {
	if !st.share.in {
		return
	}
	b.used.Add(-int64(st.share.counted))
	st.share = share{}
	b.retain(st, time.Time{})
}

// keepUntilLocked sets when st, kept for resumption only, is forgotten (zero: it is not kept
// so any more). st.mu must be held.
func (st *Stream) keepUntilLocked(t time.Time) {
	st.keepUntil = t
	if st.share.in {
		st.session.hub.budget.retain(st, t)
	}
}
