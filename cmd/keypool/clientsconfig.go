package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/keypool-go/keypool"
)

// Clients in the configuration: each a name and a token of its own, with
// optional windows across every route, a budget, the models and the routes
// it may use, and when its token expires. The proxy tokens are clients
// without any of these. Serving them is clients.go's.

// clientRef is one entry of clients:.
type clientRef struct {
	// Name labels the client in /status, the metrics and the request log.
	Name string `yaml:"name"`
	// Token is what the client presents, as a proxy token is: a literal,
	// or env:NAME.
	Token secretRef `yaml:"token"`
	// Limits are the client's own windows (rpm, rpd, tpm, tpd) across
	// every route, taken before any key is.
	Limits limits `yaml:"limits"`
	// Budget caps what the client spends, in US dollars per day and per
	// month, by the prices of the routes it reaches.
	Budget budget `yaml:"budget"`
	// Models are the models the client may ask for; empty: any.
	Models []string `yaml:"models"`
	// Routes are the upstreams the client's requests may go to, by name;
	// empty: every one.
	Routes []string `yaml:"routes"`
	// Expires is when the client's token stops working (RFC 3339).
	Expires string `yaml:"expires"`
}

// clientSettings is a client checked and resolved.
type clientSettings struct {
	field   string // its entry in the file: clients[2]
	name    string
	token   []byte
	limits  keypool.Limits
	budget  keypool.Budget
	models  []string  // nil: any
	routes  []string  // nil: every route
	expires time.Time // zero: never
}

// limited reports whether the client has windows or a budget of its own,
// which the store takes from.
func (c *clientSettings) limited() bool {
	return c.limits != (keypool.Limits{}) || c.budget != (keypool.Budget{})
}

// The bounds of a client's names and lists.
const (
	maxClients         = 1000
	maxClientName      = 64
	maxClientModels    = 256
	clientProviderName = "keypool-clients" // the pool name the clients' windows are kept under
)

// clientName matches a client's name: letters, digits, '.', '_' and '-',
// starting with a letter or a digit.
var clientName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// resolveClients reads the clients of c into s, after its tokens and
// routes, noting each mistake in m.
func (c *config) resolveClients(s *settings, env func(string) (string, bool), m *mistakes) {
	if len(c.Clients) > maxClients {
		m.addf("clients", "%d clients: at most %d", len(c.Clients), maxClients)
		return
	}
	routes := map[string]routeSettings{}
	for i, r := range s.routes {
		routes[r.name] = r
		if r.name == clientProviderName {
			m.addf(fmt.Sprintf("upstreams[%d].name", i), "%q is the name the clients' windows are kept under: give the upstream another", r.name)
		}
	}
	names := map[string]int{}
	for i, ref := range c.Clients {
		at := fmt.Sprintf("clients[%d]", i)
		cl := clientSettings{field: at, name: ref.Name, limits: ref.Limits.pool(), budget: ref.Budget.pool()}
		fine, ok := true, false
		switch j, seen := names[ref.Name]; {
		case ref.Name == "":
			m.addf(at+".name", "missing")
			fine = false
		case len(ref.Name) > maxClientName || !clientName.MatchString(ref.Name):
			m.addf(at+".name", "%q is not a name of at most %d letters, digits, '.', '_' and '-', starting with a letter or a digit", cut(ref.Name, maxClientName), maxClientName)
			fine = false
		case seen:
			m.addf(at+".name", "%q also names clients[%d]: give each client a name of its own", ref.Name, j)
			fine = false
		default:
			names[ref.Name] = i
		}
		if ref.Token == "" {
			m.addf(at+".token", "missing: the client presents it instead of an upstream key")
			fine = false
		} else if cl.token, ok = s.readToken(at+".token", ref.Token, env, m); !ok {
			fine = false
		}
		if ref.Limits.InFlight != 0 {
			m.addf(at+".limits.in_flight", "not a client's limit: a client has rpm, rpd, tpm and tpd; in_flight bounds a key's or an account's requests")
			fine = false
		}
		fine = judgeLimits(at+".limits", limits{RPM: ref.Limits.RPM, RPD: ref.Limits.RPD, TPM: ref.Limits.TPM, TPD: ref.Limits.TPD}, keypool.WithLimits, m) && fine
		fine = judgeKeyBudget(at, ref.Budget, m) && fine
		fine = resolveClientModels(at, ref.Models, &cl, m) && fine
		fine = resolveClientRoutes(at, ref, routes, &cl, m) && fine
		if ref.Expires != "" {
			t, err := time.Parse(time.RFC3339, ref.Expires)
			if err != nil {
				m.addf(at+".expires", "%q is not a time such as 2026-12-31T23:59:59Z (RFC 3339)", cut(ref.Expires, 64))
				fine = false
			}
			cl.expires = t
		}
		if fine {
			s.clients = append(s.clients, cl)
		}
	}
	s.judgeTokensApart(m)
}

// resolveClientModels reads a client's models into cl.
func resolveClientModels(at string, models []string, cl *clientSettings, m *mistakes) bool {
	if len(models) > maxClientModels {
		m.addf(at+".models", "%d models: at most %d", len(models), maxClientModels)
		return false
	}
	fine := true
	for j, model := range models {
		field := fmt.Sprintf("%s.models[%d]", at, j)
		switch {
		case model == "":
			m.addf(field, "empty")
			fine = false
		case keypool.CheckModel(model) != nil:
			m.addf(field, "%v", keypool.CheckModel(model))
			fine = false
		case slices.Contains(models[:j], model):
			m.addf(field, "%q is listed twice", model)
			fine = false
		}
	}
	if fine && len(models) > 0 {
		cl.models = slices.Clone(models)
	}
	return fine
}

// resolveClientRoutes reads a client's routes into cl: each names an
// upstream, and with a budget each it reaches prices models.
func resolveClientRoutes(at string, ref clientRef, routes map[string]routeSettings, cl *clientSettings, m *mistakes) bool {
	fine := true
	for j, name := range ref.Routes {
		field := fmt.Sprintf("%s.routes[%d]", at, j)
		switch _, ok := routes[name]; {
		case !ok:
			m.addf(field, "%q names no upstream", cut(name, 64))
			fine = false
		case slices.Contains(ref.Routes[:j], name):
			m.addf(field, "%q is listed twice", name)
			fine = false
		}
	}
	if fine && len(ref.Routes) > 0 {
		cl.routes = slices.Clone(ref.Routes)
	}
	if ref.Budget == (budget{}) {
		return fine
	}
	priced := false
	for name, r := range routes {
		if cl.routes == nil || slices.Contains(cl.routes, name) {
			priced = priced || len(r.prices) > 0
		}
	}
	if !priced {
		m.addf(at+".budget", "no upstream the client reaches has prices: a budget counts spend by the models' prices")
		return false
	}
	return fine
}

// judgeTokensApart notes in m each token given twice among the clients,
// the proxy tokens and the operator tokens: a token names one client.
func (s *settings) judgeTokensApart(m *mistakes) {
	seen := map[string]string{}
	note := func(field string, t []byte) {
		if other, ok := seen[string(t)]; ok {
			m.addf(field, "the same token as %s: each client's token is its own", other)
			return
		}
		seen[string(t)] = field
	}
	for i, t := range s.tokens {
		note(fmt.Sprintf("proxy_tokens[%d]", i), t)
	}
	for i, t := range s.operatorTokens {
		if other := seen[string(t)]; !strings.HasPrefix(other, "proxy_tokens") { // said already, by resolve
			note(fmt.Sprintf("operator_tokens[%d]", i), t)
		}
	}
	for _, cl := range s.clients {
		note(cl.field+".token", cl.token)
	}
}

// cut returns s, cut to at most n bytes with an ellipsis, for a mistake
// that quotes it.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
