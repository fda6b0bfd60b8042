package vendorsim

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Dialect names the vendor the sim speaks as: its paths, headers and bodies.
type Dialect string

// The dialects the sim speaks.
const (
	// OpenAI is api.openai.com's chat completions API.
	OpenAI Dialect = "openai"
	// OpenAICompatible is an OpenAI-compatible vendor: OpenAI's shapes, but a
	// spent balance answers 402, as DeepSeek does.
	OpenAICompatible Dialect = "openai-compatible"
	// Anthropic is api.anthropic.com's messages API.
	Anthropic Dialect = "anthropic"
	// Gemini is generativelanguage.googleapis.com's generateContent API.
	Gemini Dialect = "gemini"
)

// dialect writes one vendor's answers. Each method writing an answer sets
// its content type and request ID and writes the whole answer; the server
// has already set the rate-limit headers (headers) when the key is known.
type dialect interface {
	// route reads a request's method and path; status is 0 when they name
	// an endpoint, else 404 or 405 with a message.
	route(r *http.Request) (rt route, status int, msg string)
	// parse reads a request body the route accepted.
	parse(body []byte, rt route) (request, error)
	// prompt returns the messages of a body parse accepted, in order: the
	// prompt the prompt cache sees.
	prompt(body []byte) ([]json.RawMessage, error)
	// windowsCountCacheReads reports whether the token windows count the
	// prompt tokens read from the cache, as OpenAI's and Gemini's do;
	// Anthropic's leave them out.
	windowsCountCacheReads() bool
	// faultStatus is the default status of a fault.
	faultStatus() int
	// defaultModel is the model answered as when a request names none.
	defaultModel() string
	// headers sets the rate-limit headers that report a key's windows.
	headers(h http.Header, st *state)
	serve(w http.ResponseWriter, a *reply)
	rateLimited(w http.ResponseWriter, a *reply, rf refusal)
	usageLimited(w http.ResponseWriter, a *reply, ul usageLimit)
	unauthorized(w http.ResponseWriter, a *reply, why authFailure)
	noCredit(w http.ResponseWriter, a *reply)
	fault(w http.ResponseWriter, a *reply, status int)
	badRequest(w http.ResponseWriter, a *reply, status int, msg string)
}

// reply is what every answer to one request may need.
type reply struct {
	id         string    // request ID, unique within a server
	now        time.Time // the sim's clock when the request was decided
	rt         route
	req        request
	model      string // the model answered as
	account    string // the key's account; "" for none
	completion int64
	truncated  bool // max_tokens cut the completion short
	// cache is set when the prompt cache is on; cached and written are then
	// the prompt tokens read from it and written to it.
	cache           bool
	cached, written int64
}

// authFailure says why a request is not authenticated.
type authFailure int

const (
	authMissing authFailure = iota // no credential at all
	authUnknown                    // a credential the sim does not know
	authRevoked                    // a known key that is revoked
)

// state is the windows a known key is held to (its own or its account's) as
// one answer reports them. A nil axis has no limit.
type state struct {
	now                             time.Time
	requests, tokens, input, output *axis
	unified                         *unified // subscription-style keys only
}

// axis is one window as a header reports it.
type axis struct {
	limit, remaining int64
	reset            time.Duration // until fully replenished
}

// unified is a subscription-style key's 5-hour and 7-day windows, as
// Anthropic's anthropic-ratelimit-unified-* headers report them.
type unified struct {
	status      string // allowed, allowed_warning, rejected
	five, seven claimWindow
	claim       string    // the representative claim: five_hour or seven_day
	reset       time.Time // the representative claim's reset
}

// claimWindow is one unified window.
type claimWindow struct {
	utilization float64
	reset       time.Time
	status      string
}

// refusal is a request refused by one of the windows its key is held to
// (RPM, RPD, TPM, TPD): the one that lifts last when several are full.
type refusal struct {
	axis      string // "RPM", "RPD", "TPM" or "TPD"
	limit     int64
	used      int64
	requested int64
	wait      time.Duration // until the window admits the request
	tooLarge  bool          // the request alone exceeds the limit
}

func (rf refusal) tokens() bool { return rf.axis == "TPM" || rf.axis == "TPD" }

// usageLimit is a spent subscription window.
type usageLimit struct {
	claim   string // five_hour or seven_day
	resetAt time.Time
	wait    time.Duration
}

// newDialect returns the dialect d names.
func newDialect(d Dialect) (dialect, bool) {
	switch d {
	case OpenAI, "":
		return openAI{}, true
	case OpenAICompatible:
		return openAI{compatible: true}, true
	case Anthropic:
		return anthropic{}, true
	case Gemini:
		return gemini{}, true
	}
	return nil, false
}

// writeJSON writes v as a JSON answer with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil { // the sim's own values always marshal
		body = []byte(`{"error":{"message":"vendorsim: cannot encode answer"}}`)
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ceilSeconds returns d in whole seconds, rounded up, at least 1 for a
// positive d and never negative.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// itoa formats an int64.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
