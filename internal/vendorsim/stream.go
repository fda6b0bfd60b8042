package vendorsim

import (
	"encoding/json"
	"net/http"
	"strings"
)

// streamChunks is how many pieces a streamed answer's text is cut into.
const streamChunks = 4

// sse writes a server-sent-event stream, flushing after each event so that a
// client reads the events as they are sent.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	eol string // line end: "\n", or "\r\n" for Gemini
	err error  // the first write error; later events are dropped
}

// startSSE sends the 200 status and headers of an event stream.
func startSSE(w http.ResponseWriter, eol string) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w), eol: eol}
}

// event writes one event: an "event:" line when name is set, then v as one
// "data:" line of JSON (or as is, when v is a string), then a blank line.
func (s *sse) event(name string, v any) {
	if s.err != nil {
		return
	}
	var data []byte
	if str, ok := v.(string); ok {
		data = []byte(str)
	} else if data, s.err = json.Marshal(v); s.err != nil {
		return
	}
	var b strings.Builder
	if name != "" {
		b.WriteString("event: ")
		b.WriteString(name)
		b.WriteString(s.eol)
	}
	b.WriteString("data: ")
	b.Write(data)
	b.WriteString(s.eol)
	b.WriteString(s.eol)
	if _, s.err = s.w.Write([]byte(b.String())); s.err != nil {
		return
	}
	s.err = s.rc.Flush()
}

// chunkText cuts text into at most n pieces at word boundaries; joined, the
// pieces give text back. It returns one empty piece for an empty text.
func chunkText(text string, n int) []string {
	words := strings.SplitAfter(text, " ")
	if n < 1 || len(words) <= 1 {
		return []string{text}
	}
	n = min(n, len(words))
	pieces := make([]string, 0, n)
	per := (len(words) + n - 1) / n
	for i := 0; i < len(words); i += per {
		pieces = append(pieces, strings.Join(words[i:min(i+per, len(words))], ""))
	}
	return pieces
}
