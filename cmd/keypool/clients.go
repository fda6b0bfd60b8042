package main

import (
	"bytes"
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keypool-go/keypool"
)

// Serving clients: the guard names the client whose token a request
// presents; before the request goes on, the client's own rules are held —
// its token's expiry, its models, its windows and budget, taken from the
// pools' store in one atomic step as a key's are (so replicas sharing a
// Redis share them), and its routes, which the fallback alone is then
// given. Once the answer is read, what it used settles the client's take,
// as a key's, and counts in the client's use, by tag, for /status and the
// metrics. The configuration of clients is clientsconfig.go's.

// client is one client of the running proxy: its settings and its use.
type client struct {
	*clientSettings
	use *clientUse // a reload's successor keeps it, by the client's name (reload.go)
}

// clientModel is the model a client's windows are kept under: they count
// across every model and route.
const clientModel = "*"

// tagHeader names the header a request's tag comes in; it never goes
// upstream.
const tagHeader = "X-Keypool-Tag"

// The bounds of tags: a tag's length, and how many distinct tags a client
// counts apart in a month, beyond which they count as otherTag.
const (
	maxTagLength     = 64
	maxTagsPerClient = 32
	otherTag         = "other"
)

// tagPattern matches a tag: letters, digits, '.', '_', ':' and '-'.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// maxClientScan bounds what of a request's body is read for a client's
// rules — its model and its token estimate — as the pools bound theirs.
const maxClientScan = 1 << 20

// newClients returns the running clients of s: those of clients:, then a
// client without rules for each proxy token.
func newClients(s *settings) []*client {
	var all []*client
	for i := range s.clients {
		all = append(all, &client{clientSettings: &s.clients[i], use: &clientUse{}})
	}
	for i, t := range s.tokens {
		f := fmt.Sprintf("proxy_tokens[%d]", i)
		all = append(all, &client{clientSettings: &clientSettings{field: f, name: f, token: t}, use: &clientUse{}})
	}
	return all
}

// clientFor returns the client whose token is among presented, or nil.
func (s *server) clientFor(presented []string) *client {
	for _, p := range presented {
		if p == "" {
			continue
		}
		for _, c := range s.clients {
			if subtle.ConstantTimeCompare([]byte(p), c.token) == 1 {
				return c
			}
		}
	}
	return nil
}

// clientCall is what the proxy knows of one client's request as it goes.
type clientCall struct {
	client *client
	tag    string              // as the request gave it: "" for none
	res    keypool.Reservation // what its windows and budget recorded; nil: none
	// claimed is what res recorded: the request's tokens and its reserve.
	claimed keypool.Settlement

	mu       sync.Mutex // guards the fields below
	used     keypool.Settlement
	heard    bool // a pool settled the request (NotifySettle)
	noAnswer bool // the proxy answered it itself: no upstream's answer came
	sent     bool // a pool sent it upstream (OnAttempt), whatever came of it
}

type callKey struct{}

// callOf returns the client's call a request's context carries, or nil.
func callOf(ctx context.Context) *clientCall {
	c, _ := ctx.Value(callKey{}).(*clientCall)
	return c
}

func (c *clientCall) settled(u keypool.Settlement) {
	c.mu.Lock()
	c.used, c.heard = u, true
	c.mu.Unlock()
}

// unanswered notes that no upstream's answer reached the client.
func (c *clientCall) unanswered() {
	if c != nil {
		c.mu.Lock()
		c.noAnswer = true
		c.mu.Unlock()
	}
}

// attempted notes that a pool sent the request upstream, in attempt a.
// A success forgets what earlier attempts settled — a refusing key's
// zero — so that a success without usage leaves the reserve to stand
// (settleClient) rather than settle at that zero; its own usage, read
// with its body, comes after.
func (c *clientCall) attempted(a keypool.Attempt) {
	if c != nil {
		c.mu.Lock()
		c.sent = true
		if a.Status >= 200 && a.Status < 300 {
			c.used, c.heard = keypool.Settlement{}, false
		}
		c.mu.Unlock()
	}
}

// wasSent reports whether a pool sent the request upstream.
func (c *clientCall) wasSent() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// admit holds the rules of the client of call, which r's context
// carries, for r before it goes on. It returns the request to forward, on
// whose answer settleClient is to be called once it is written, or ok
// false when it answered r itself.
func (s *server) admit(w http.ResponseWriter, r *http.Request, call *clientCall) (_ *http.Request, ok bool) {
	cl := call.client
	now := s.now()
	if !cl.expires.IsZero() && !now.Before(cl.expires) {
		refused(r, "expired")
		writeError(w, http.StatusUnauthorized, "authentication_error",
			fmt.Sprintf("keypool: the token of client %s expired at %s", cl.name, cl.expires.UTC().Format(time.RFC3339)), nil)
		return nil, false
	}
	tag, err := readTag(r.Header)
	if err != nil {
		refused(r, "refused")
		writeError(w, http.StatusBadRequest, "invalid_request_error", "keypool: "+err.Error(), nil)
		return nil, false
	}
	r.Header.Del(tagHeader)
	call.tag = tag
	recordOf(r.Context()).set(func(rec *requestRecord) { rec.client, rec.tag = cl.name, tag })
	var info keypool.RequestInfo
	if cl.models != nil || cl.limits.TPM > 0 || cl.limits.TPD > 0 || cl.budget != (keypool.Budget{}) {
		// Only these need the body: a request's model, or its estimate.
		if info, ok = s.readForClient(w, r, cl.models != nil); !ok {
			return nil, false
		}
	}
	if cl.models != nil && !slices.Contains(cl.models, info.Model) {
		refused(r, "refused")
		msg := fmt.Sprintf("keypool: client %s may not use the model %q: its models are %q in the proxy's configuration", cl.name, cut(info.Model, 64), cl.models)
		if info.Model == "" {
			msg = fmt.Sprintf("keypool: the request names no model, and client %s may use only the models %q", cl.name, cl.models)
		}
		writeError(w, http.StatusForbidden, "permission_error", s.redact.String(msg), nil)
		return nil, false
	}
	if cl.limited() {
		if call.res, call.claimed, ok = s.takeForClient(w, r, cl, info, now); !ok {
			return nil, false
		}
	}
	ctx := keypool.NotifySettle(r.Context(), call.settled)
	ctx = keypool.OnlyRoutes(ctx, cl.routes...)
	return r.WithContext(ctx), true
}

// readTag returns the tag a request's header names, "" for none, or an
// error saying why it is not one; the error never quotes it.
func readTag(h http.Header) (string, error) {
	v := h.Values(tagHeader)
	switch {
	case len(v) == 0 || len(v) == 1 && v[0] == "":
		return "", nil
	case len(v) > 1:
		return "", fmt.Errorf("%s is given %d times: give one tag", tagHeader, len(v))
	case len(v[0]) > maxTagLength || !tagPattern.MatchString(v[0]):
		return "", fmt.Errorf("%s is not a tag of at most %d letters, digits, '.', '_', ':' and '-'", tagHeader, maxTagLength)
	}
	return v[0], nil
}

// readForClient reads the start of r's body — at most maxClientScan bytes,
// which go on before the rest, or all of it (within max_request_body) when
// whole — and returns what the pools would read of it: its model and what
// its token estimate counts. A client held to models has its body read
// whole: a vendor's JSON parser takes a body's last "model", which may
// come after the start. It answers r itself, and returns ok false, when
// the body cannot be read.
func (s *server) readForClient(w http.ResponseWriter, r *http.Request, whole bool) (keypool.RequestInfo, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return keypool.ReadRequest(r.URL.Path, nil), true
	}
	limit := int64(maxClientScan)
	if whole {
		limit = s.settings.maxBody + 1 // the body's own MaxBytesReader refuses what is over
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, limit))
	if err != nil {
		s.proxyError(w, r, fmt.Errorf("reading the request body: %w", err))
		return keypool.RequestInfo{}, false
	}
	rest := r.Body
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), rest), rest}
	info := keypool.ReadRequest(r.URL.Path, head)
	if more := r.ContentLength - int64(len(head)); more > 0 {
		info.PromptBytes += more // as the pools count a body longer than they read
	}
	return info, true
}

// takeForClient takes the request from the client's windows and budget
// in the store, and returns what it recorded; it answers r itself, and
// returns ok false, when they refuse it.
func (s *server) takeForClient(w http.ResponseWriter, r *http.Request, cl *client, info keypool.RequestInfo, now time.Time) (keypool.Reservation, keypool.Settlement, bool) {
	claim := keypool.Claim{Provider: clientProviderName, KeyID: cl.name, Model: clientModel, Named: true,
		Limits: cl.limits, Budget: cl.budget, Now: now}
	estimate := keypool.DefaultEstimate(info)
	if cl.limits.TPM > 0 || cl.limits.TPD > 0 {
		claim.Tokens = estimate
		for _, l := range []int64{cl.limits.TPM, cl.limits.TPD} {
			if l > 0 {
				claim.Tokens = min(claim.Tokens, l)
			}
		}
	}
	if cl.budget != (keypool.Budget{}) {
		cost, unbounded, ok := s.clientReserve(cl, info, estimate)
		if !ok {
			refused(r, "refused")
			writeError(w, http.StatusBadRequest, "invalid_request_error",
				s.redact.String(fmt.Sprintf("keypool: the model %q has no price in the upstreams client %s reaches, and the client has a budget", cut(info.Model, 64), cl.name)), nil)
			return nil, keypool.Settlement{}, false
		}
		claim.Cost, claim.Unbounded = cost, unbounded
	}
	grant, err := s.store.Take(r.Context(), claim)
	if err != nil {
		s.proxyError(w, r, err)
		return nil, keypool.Settlement{}, false
	}
	if !grant.OK {
		s.overClientLimit(w, r, cl, grant)
		return nil, keypool.Settlement{}, false
	}
	return grant.Reservation, keypool.Settlement{Tokens: claim.Tokens, Cost: claim.Cost}, true
}

// clientReserve returns what a client's request reserves of its budget
// before the route that serves it is known: the most it can cost at the
// price of its model in any route the client reaches, by each route's
// name for it — the dearest for this request, by its input and its
// output bound, not by the prices' sum — and whether nothing bounds its
// output at one of them. ok is false when no such route prices it.
func (s *server) clientReserve(cl *client, info keypool.RequestInfo, estimate int64) (cost int64, unbounded, ok bool) {
	for _, r := range s.settings.routes {
		if cl.routes != nil && !slices.Contains(cl.routes, r.name) {
			continue
		}
		name := info.Model
		if to, renamed := r.models[info.Model]; renamed {
			name = to
		}
		p, priced := r.prices[name]
		if !priced {
			continue
		}
		c, u := p.Reserve(info, estimate)
		cost, unbounded, ok = max(cost, c), unbounded || u, true
	}
	return cost, unbounded, ok
}

// overClientLimit answers a request the client's own windows or budget
// refused: 429, with when it could be taken.
func (s *server) overClientLimit(w http.ResponseWriter, r *http.Request, cl *client, g keypool.Grant) {
	refused(r, "client_limit")
	what := "its per-minute limit (rpm, tpm)"
	switch {
	case g.Reason == keypool.KindQuota:
		what = "its daily limit or its budget (rpd, tpd, budget)"
	case cl.limits.RPM == 0 && cl.limits.TPM == 0:
		// A second's refusal with no minute limit: its requests in
		// flight hold what is left of its budget.
		what = "its budget, which its requests in flight hold (budget)"
	}
	extra := map[string]any{"client": cl.name, "limit": "client"}
	if !g.RetryAt.IsZero() {
		secs := int64(math.Ceil(g.RetryAt.Sub(s.now()).Seconds()))
		w.Header().Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
		extra["retry_at"] = g.RetryAt.UTC().Format(time.RFC3339)
	}
	writeError(w, http.StatusTooManyRequests, "rate_limit_error",
		fmt.Sprintf("keypool: client %s has reached %s in the proxy's configuration: the client's own limit, not the vendor's", cl.name, what), extra)
}

// settleClient settles a client's request once its answer is written: at
// what a pool settled it (tokens, cost), or nothing when no upstream
// answered; else its estimate stands, as a key's does. It counts the
// request in the client's use.
func (s *server) settleClient(call *clientCall) {
	res := call.res
	call.mu.Lock()
	used, heard, noAnswer := call.used, call.heard, call.noAnswer
	call.mu.Unlock()
	ctx := context.Background() // the request's context may be over
	if res != nil {
		var err error
		switch {
		case heard:
			err = res.Settle(ctx, used.Tokens, used.Cost)
		case noAnswer:
			err = res.Release(ctx)
		default:
			// Answered, but no usage reported (a stream without
			// include_usage): what it reserved is spent, not held as
			// if the request were still in flight until the period ends.
			err = res.Settle(ctx, call.claimed.Tokens, call.claimed.Cost)
		}
		if err != nil {
			s.log.Warn("settling a client's request", "client", call.client.name, "err", s.reason(err))
		}
	}
	if noAnswer && !heard {
		return // never reached an upstream: not the client's use
	}
	attrs := call.client.use.add(call.client.name, call.tag, s.now(), used.Tokens, used.Cost)
	s.clientMeters.add(attrs, used)
}

// useCount is what a client used in a period: requests, the tokens their
// answers reported, and their cost in millionths of a US dollar.
type useCount struct {
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
	micros   int64
}

// clientUse is what a client used, by tag, today and this month (UTC),
// in this process. It is safe for concurrent use.
type clientUse struct {
	mu         sync.Mutex // guards the fields below
	day, month time.Time  // the starts of the periods counted
	today      map[string]*useCount
	thisMonth  map[string]*useCount // its keys are the tags counted apart this month
	// attrs are the metrics' attributes of each tag of thisMonth, made
	// once: the client's name and the tag.
	attrs map[string]metric.MeasurementOption
}

// roll starts new periods when now is past the ones counted. The caller
// holds u.mu.
func (u *clientUse) roll(now time.Time) {
	day, _ := keypool.CalendarDay(now, 0, time.UTC)
	month, _ := keypool.CalendarMonth(now, 0, time.UTC)
	if !day.Equal(u.day) || u.today == nil {
		u.day, u.today = day, map[string]*useCount{}
	}
	if !month.Equal(u.month) || u.thisMonth == nil {
		u.month, u.thisMonth, u.attrs = month, map[string]*useCount{}, map[string]metric.MeasurementOption{}
	}
}

// attributes returns the metrics' attributes of client's tag. The caller
// holds u.mu, and has rolled it.
func (u *clientUse) attributes(client, tag string) metric.MeasurementOption {
	a, ok := u.attrs[tag]
	if !ok {
		a = metric.WithAttributeSet(attribute.NewSet(attribute.String("client", client), attribute.String("tag", tag)))
		u.attrs[tag] = a
	}
	return a
}

// bounded returns tag, or otherTag when the client already counts
// maxTagsPerClient others apart this month. The caller holds u.mu, and
// has rolled it.
func (u *clientUse) bounded(tag string) string {
	if tag == "" {
		return ""
	}
	if _, ok := u.thisMonth[tag]; ok {
		return tag
	}
	tags := len(u.thisMonth)
	if _, ok := u.thisMonth[""]; ok {
		tags--
	}
	if _, ok := u.thisMonth[otherTag]; ok && tag != otherTag {
		tags--
	}
	if tags >= maxTagsPerClient {
		return otherTag
	}
	return tag
}

// add counts one request of client's tag at now — under otherTag when
// the client counts as many others apart this month as it may — and
// returns the metrics' attributes of the tag it counted under.
func (u *clientUse) add(client, tag string, now time.Time, tokens, micros int64) metric.MeasurementOption {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.roll(now)
	tag = u.bounded(tag)
	for _, m := range []map[string]*useCount{u.today, u.thisMonth} {
		c := m[tag]
		if c == nil {
			c = &useCount{}
			m[tag] = c
		}
		c.Requests++
		c.Tokens += tokens
		c.micros += micros
	}
	return u.attributes(client, tag)
}

// clientReport is a client in /status: its rules, and what it used today
// and this month (UTC), in all and by tag, as this process counted it.
type clientReport struct {
	Name    string          `json:"name"`
	Limits  *keypool.Limits `json:"limits,omitempty"`
	Budget  *keypool.Budget `json:"budget,omitempty"`
	Models  []string        `json:"models,omitempty"`
	Routes  []string        `json:"routes,omitempty"`
	Expires time.Time       `json:"expires,omitzero"`
	// Spent is what the store counts the client spent today and this
	// month, in US dollars, with what its requests in flight reserve:
	// across every replica that shares the store. Only a client with a
	// budget has it.
	Spent *keypool.Budget `json:"spent,omitempty"`
	// Today and Month are what this process served the client.
	Today useReport   `json:"today"`
	Month useReport   `json:"month"`
	Tags  []tagReport `json:"tags,omitempty"`
}

// useReport is a useCount with its spend in US dollars.
type useReport struct {
	Requests int64   `json:"requests"`
	Tokens   int64   `json:"tokens"`
	Spend    float64 `json:"spend_usd"`
}

func (c useCount) view() useReport {
	return useReport{Requests: c.Requests, Tokens: c.Tokens, Spend: float64(c.micros) / 1e6}
}

// tagReport is what a client used under one tag.
type tagReport struct {
	Tag   string    `json:"tag"`
	Today useReport `json:"today"`
	Month useReport `json:"month"`
}

// reportClients returns the clients for /status at now.
func (s *server) reportClients(now time.Time) []clientReport {
	views := make([]clientReport, 0, len(s.clients))
	for _, c := range s.clients {
		v := clientReport{Name: c.name, Models: c.models, Routes: c.routes, Expires: c.expires}
		if c.limits != (keypool.Limits{}) {
			v.Limits = &c.limits
		}
		if c.budget != (keypool.Budget{}) {
			v.Budget = &c.budget
			if st, err := s.store.State(context.Background(), clientProviderName, c.name, now); err == nil {
				v.Spent = &st.Spent
			}
		}
		c.use.mu.Lock()
		c.use.roll(now)
		var today, month useCount
		for _, tag := range sortedKeys(c.use.thisMonth) {
			t, m := c.use.today[tag], c.use.thisMonth[tag]
			tv := tagReport{Tag: tag, Month: m.view()}
			if t != nil {
				tv.Today = t.view()
				today.Requests, today.Tokens, today.micros = today.Requests+t.Requests, today.Tokens+t.Tokens, today.micros+t.micros
			}
			month.Requests, month.Tokens, month.micros = month.Requests+m.Requests, month.Tokens+m.Tokens, month.micros+m.micros
			if tag != "" {
				v.Tags = append(v.Tags, tv)
			}
		}
		c.use.mu.Unlock()
		v.Today, v.Month = today.view(), month.view()
		views = append(views, v)
	}
	return views
}

// clientMeters are the metrics of the clients' use, by client and tag:
// both bounded, the clients by the configuration, the tags by
// maxTagsPerClient.
type clientMeters struct {
	requests, tokens metric.Int64Counter
	spend            metric.Float64Counter
}

func newClientMeters(m metric.Meter) (clientMeters, error) {
	var c clientMeters
	var err error
	if c.requests, err = m.Int64Counter("keypool.client.requests", metric.WithDescription("Requests of each client the proxy sent upstream, by client and tag.")); err != nil {
		return c, err
	}
	if c.tokens, err = m.Int64Counter("keypool.client.tokens", metric.WithDescription("Tokens the answers to each client reported, by client and tag.")); err != nil {
		return c, err
	}
	c.spend, err = m.Float64Counter("keypool.client.spend", metric.WithUnit("USD"), metric.WithDescription("What the answers to each client cost at the upstreams' prices, by client and tag."))
	return c, err
}

// add counts one request that used u, under attrs: its client and its tag
// ("" for none).
func (c clientMeters) add(attrs metric.MeasurementOption, u keypool.Settlement) {
	if c.requests == nil {
		return
	}
	ctx := context.Background()
	c.requests.Add(ctx, 1, attrs)
	if u.Tokens > 0 {
		c.tokens.Add(ctx, u.Tokens, attrs)
	}
	if u.Cost > 0 {
		c.spend.Add(ctx, float64(u.Cost)/1e6, attrs)
	}
}

// printClients writes, for keypool status, what each client used today
// and this month, and under each of its tags: a client without rules
// that used nothing this month is left out.
func printClients(w io.Writer, clients []clientReport) {
	var shown []clientReport
	for _, c := range clients {
		if c.Month.Requests > 0 || c.Limits != nil || c.Budget != nil || c.Models != nil || c.Routes != nil || !c.Expires.IsZero() {
			shown = append(shown, c)
		}
	}
	if len(shown) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tTODAY\tTHIS MONTH")
	for _, c := range shown {
		today, month := c.Today.Spend, c.Month.Spend
		var perDay, perMonth float64
		if c.Spent != nil { // the store's, across replicas, against the budget
			today, month = max(today, c.Spent.PerDay), max(month, c.Spent.PerMonth)
		}
		if c.Budget != nil {
			perDay, perMonth = c.Budget.PerDay, c.Budget.PerMonth
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, useLine(c.Today, today, perDay), useLine(c.Month, month, perMonth))
		for _, t := range c.Tags {
			fmt.Fprintf(tw, "  tag %s\t%s\t%s\n", t.Tag, useLine(t.Today, t.Today.Spend, 0), useLine(t.Month, t.Month.Spend, 0))
		}
	}
	tw.Flush()
}

// useLine says what was used: "12 requests, 3400 tokens, 0.12 of 2.00 USD".
func useLine(u useReport, spend, limit float64) string {
	return fmt.Sprintf("%s, %s, %s USD", count(int(u.Requests), "request"), count(int(u.Tokens), "token"), spentOf(spend, limit))
}
