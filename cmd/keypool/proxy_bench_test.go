package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// benchUpstream answers as an OpenAI-style vendor at once: a JSON
// completion, or a stream of eight chunks and the usage, each flushed.
func benchUpstream(b *testing.B) *httptest.Server {
	const chunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"word "}}]}` + "\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Ratelimit-Remaining-Requests", "9999")
		w.Header().Set("X-Ratelimit-Reset-Requests", "6ms")
		if r.URL.Query().Get("mode") == "stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			for range 8 {
				_, _ = io.WriteString(w, chunk)
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8,\"total_tokens\":17}}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"chatcmpl-bench","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":6,"total_tokens":15}}`)
	}))
	b.Cleanup(up.Close)
	return up
}

// BenchmarkProxy measures a request through keypool serve — its server,
// limits, redaction, fallback and pool of four keys — against the floor, a
// plain httputil.ReverseProxy with a transport sized for a proxy that puts
// one fixed key on each request; one client, and 32 at once, on loopback
// in one process. scripts/bench/proxy measures the same as processes of
// their own, with CPU per request.
func BenchmarkProxy(b *testing.B) {
	up := benchUpstream(b)
	target, _ := url.Parse(up.URL)
	floor := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("Authorization", "Bearer sk-fixed")
		},
		Transport:     upstreamTransport(routeSettings{idleConns: 256}),
		FlushInterval: -1,
	})
	b.Cleanup(floor.Close)
	serve := "http://" + serveReal(b, oneUpstream(b, up.URL, "keys: [{secret: sk-1}, {secret: sk-2}, {secret: sk-3}, {secret: sk-4}]"))
	for _, proxy := range []struct{ name, url string }{{"serve", serve}, {"floor", floor.URL}} {
		for _, mode := range []string{"json", "stream"} {
			for _, clients := range []int{1, 32} {
				b.Run(proxy.name+"/"+mode+"/clients="+strconv.Itoa(clients), func(b *testing.B) {
					client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
					defer client.CloseIdleConnections()
					u := proxy.url + "/v1/chat/completions?mode=" + mode
					b.SetParallelism(max(clients/2, 1)) // GOMAXPROCS 2 on the machines the figures come from
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						buf := make([]byte, 16<<10)
						for pb.Next() {
							req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
							req.Header.Set("Authorization", "Bearer "+proxyToken)
							resp, err := client.Do(req)
							if err != nil {
								b.Error(err)
								return
							}
							_, _ = io.CopyBuffer(io.Discard, resp.Body, buf)
							resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								b.Errorf("status %d", resp.StatusCode)
								return
							}
						}
					})
				})
			}
		}
	}
}
