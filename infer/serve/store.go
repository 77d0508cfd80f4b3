package serve

import (
	"container/list"
	"net/http"
	"strconv"
	"sync"
)

// responseStore keeps the Responses API's responses for previous_response_id, in memory and
// bounded by count and by bytes, the oldest evicted first. Each entry holds only the messages its
// request added (its input and its output) and its parent's id, so a chain of n responses costs
// what its messages cost, not n copies of its history.
type responseStore struct {
	mu       sync.Mutex
	maxCount int
	maxBytes int64
	bytes    int64
	order    *list.List // of *storedResponse, oldest at the front
	byID     map[string]*list.Element
}

type storedResponse struct {
	id     string
	parent string        // previous_response_id, or ""
	msgs   []chatMessage // what this response added to the conversation
	size   int64
}

func newResponseStore(count int, bytes int64) *responseStore {
	return &responseStore{maxCount: count, maxBytes: bytes, order: list.New(), byID: map[string]*list.Element{}}
}

func messagesSize(msgs []chatMessage) int64 {
	n := int64(0)
	for _, m := range msgs {
		n += int64(len(m.Role) + len(m.Content) + len(m.Name) + len(m.ToolCallID) + 64)
		for _, tc := range m.ToolCalls {
			n += int64(len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments) + 32)
		}
	}
	return n
}

// put stores a response; one larger than the byte bound is not kept.
func (st *responseStore) put(id, parent string, msgs []chatMessage) {
	r := &storedResponse{id: id, parent: parent, msgs: msgs, size: messagesSize(msgs)}
	st.mu.Lock()
	defer st.mu.Unlock()
	if r.size > st.maxBytes {
		return
	}
	st.byID[id] = st.order.PushBack(r)
	st.bytes += r.size
	for st.order.Len() > st.maxCount || st.bytes > st.maxBytes {
		old := st.order.Remove(st.order.Front()).(*storedResponse)
		delete(st.byID, old.id)
		st.bytes -= old.size
	}
}

// history returns the conversation up to and including response id, oldest message first.
func (st *responseStore) history(id string) ([]chatMessage, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var chain []*storedResponse
	for cur := id; cur != ""; {
		e, ok := st.byID[cur]
		if !ok {
			if cur == id {
				return nil, &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "previous_response_not_found", param: "previous_response_id",
					message: "previous response " + quote(id) + " not found: this server keeps the latest responses in memory only (the oldest are evicted, and none survive a restart); send the conversation as input instead"}
			}
			return nil, &apiError{status: http.StatusNotFound, typ: typeInvalid, code: "previous_response_not_found", param: "previous_response_id",
				message: "previous response " + quote(id) + " continues response " + quote(cur) + ", which this server no longer keeps (evicted from its memory): send the conversation as input instead"}
		}
		r := e.Value.(*storedResponse)
		chain = append(chain, r)
		cur = r.parent
	}
	var out []chatMessage
	for i := len(chain) - 1; i >= 0; i-- {
		out = append(out, chain[i].msgs...)
	}
	return out, nil
}

func quote(s string) string { return strconv.Quote(s) }
