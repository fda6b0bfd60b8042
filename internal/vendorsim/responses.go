package vendorsim

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Responses answers OpenAI's Responses (POST …/responses) and Conversations
// (POST …/conversations) endpoints as the vendor does for keys of different
// organisations: each key, its bearer token, is an organisation of its own;
// what an answer makes — a response, resp_…, or a conversation, conv_… — is
// kept for that key; and a request whose previous_response_id or
// conversation (an ID, or an object's "id") another key made is refused 400
// previous_response_not_found, in the body users of other gateways quote
// (maximhq/bifrost#2441). A request with "stream": true is answered with
// the Responses stream's events: response.created with the response's ID,
// a text delta, response.completed with its usage. The zero value is ready
// to use, and it is safe for concurrent use.
type Responses struct {
	mu     sync.Mutex
	owner  map[string]string // an ID → the key that made it
	made   int
	served []string
}

// ServeHTTP answers one request.
func (v *Responses) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	var req struct {
		Previous     string          `json:"previous_response_id"`
		Conversation json.RawMessage `json:"conversation"`
		Stream       bool            `json:"stream"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
	var conv string
	if json.Unmarshal(req.Conversation, &conv) != nil {
		var o struct{ ID string }
		_ = json.Unmarshal(req.Conversation, &o)
		conv = o.ID
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.served = append(v.served, key)
	for _, id := range []string{req.Previous, conv} {
		if id != "" && v.owner[id] != key {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"code": "previous_response_not_found", "message": fmt.Sprintf("Previous response with id '%s' not found.", id),
				"param": "previous_response_id", "type": "invalid_request_error",
			}})
			return
		}
	}
	if v.owner == nil {
		v.owner = map[string]string{}
	}
	v.made++
	prefix := "resp_"
	if strings.HasSuffix(r.URL.Path, "/conversations") {
		prefix = "conv_"
	}
	id := fmt.Sprintf("%s%08x", prefix, uint32(v.made)*2654435761)
	v.owner[id] = key
	answer := fmt.Sprintf(`{"id":%q,"object":"response","status":"completed","output":[{"id":"msg_%d","type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":10,"output_tokens":5,"total_tokens":15}}`, id, v.made)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = fmt.Fprintf(w, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":%q,\"status\":\"in_progress\"}}\n\n", id)
	_, _ = fmt.Fprintf(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_%d\",\"delta\":\"hi\"}\n\n", v.made)
	_, _ = fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":%s}\n\n", answer)
}

// Served returns the key of each request answered, in order, from the
// from-th.
func (v *Responses) Served(from int) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.served[min(from, len(v.served)):]...)
}
