// Command proxy measures keypool serve side by side with the build it
// replaces and with a plain httputil.ReverseProxy that puts one fixed key on
// each request, all as processes of their own against one fake
// OpenAI-style upstream on loopback:
//
//   - requests per second and CPU per request of the proxy process, for JSON
//     answers and streams, with 1 and 32 clients at once;
//   - time to first byte of a stream, against the upstream alone;
//   - resident memory per stream in flight, 1,000 of them at once.
//
// Runs are interleaved — each round measures every proxy once, in an order
// that rotates, and cuts each measurement into slices sent in turn with the
// other proxies' — and the table shows medians, so that the noise of a
// shared machine falls on all alike.
//
//	go run ./scripts/bench/proxy                   # about three minutes; -runs 7 about five
//	go run ./scripts/bench/proxy -runs 7 -before main
//	go run ./scripts/bench/proxy -before "" -tsv   # no build before; the goals only, for scripts/bench
//
// The ratios are medians of each round's ratio, the two measured in
// alternating slices; requests per second and CPU are medians over the
// rounds.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// beforeRef is main before the proxy had transports of its own, its
// limits and its redaction: its routes sent through http.DefaultTransport,
// which keeps 2 idle connections per host.
const beforeRef = "72506d9"

const benchToken = "kp-bench-token"

func main() {
	role := flag.String("role", "", "internal: run as the upstream or the floor proxy")
	upstreamURL := flag.String("upstream", "", "internal: the upstream of the floor proxy")
	before := flag.String("before", beforeRef, "the git revision whose keypool serve is measured as the build before; empty for none")
	runs := flag.Int("runs", 3, "interleaved rounds; the table shows medians")
	nSlices := flag.Int("slices", 8, "slices each target's load in a round is cut into, sent in turn with the other targets'")
	requests := flag.Int("requests", 20000, "requests a measurement sends with 32 clients (a quarter of it with 1)")
	streams := flag.Int("streams", 1000, "streams held at once for the memory measurement")
	pin := flag.Bool("pin", true, "with 2 CPUs or more and taskset: the load generator on CPU 0, the upstream and the proxies on CPU 1")
	tsv := flag.Bool("tsv", false, "print only the goals, a tab-separated line each: goal, measured, target, pass or FAIL")
	flag.Parse()
	var err error
	switch *role {
	case "upstream":
		err = serveUpstream()
	case "floor":
		err = serveFloor(*upstreamURL)
	case "":
		err = bench(*before, *runs, max(*nSlices, 1), *requests, *streams, *pin, *tsv)
	default:
		err = fmt.Errorf("unknown role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench proxy:", err)
		os.Exit(1)
	}
}

// The upstream's answers: OpenAI's shapes and headers, answered at once.
var (
	jsonAnswer = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1764540000,"model":"gpt-4o-mini-2024-07-18",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today? I can answer questions, write, and explain."},` +
		`"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":18,"total_tokens":27},"system_fingerprint":"fp_bench"}`)
	streamChunk = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764540000,"model":"gpt-4o-mini-2024-07-18",` +
		`"choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n"
	streamUsage = `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764540000,"model":"gpt-4o-mini-2024-07-18",` +
		`"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":8,"total_tokens":17}}` + "\n\ndata: [DONE]\n\n"
)

// serveUpstream answers as a fake OpenAI-style vendor on a loopback port,
// which it prints: a JSON completion, or a stream of eight chunks and the
// usage, each flushed; /hold streams one chunk and holds until the client
// leaves.
func serveUpstream() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("listening", ln.Addr())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			http.Error(w, `{"error":{"type":"invalid_api_key"}}`, http.StatusUnauthorized)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		hdr := w.Header()
		// Limits far above what the benchmark sends in a minute: keypool
		// follows what a vendor states, and would hold back at 10,000 a
		// minute a key, as OpenAI would.
		hdr.Set("X-Ratelimit-Limit-Requests", "1000000000")
		hdr.Set("X-Ratelimit-Remaining-Requests", "999999999")
		hdr.Set("X-Ratelimit-Reset-Requests", "6ms")
		hdr.Set("X-Ratelimit-Limit-Tokens", "1000000000000")
		hdr.Set("X-Ratelimit-Remaining-Tokens", "999999999990")
		hdr.Set("X-Ratelimit-Reset-Tokens", "0s")
		hdr.Set("X-Request-Id", "req_0123456789abcdef")
		switch r.URL.Query().Get("mode") {
		case "json":
			hdr.Set("Content-Type", "application/json")
			_, _ = w.Write(jsonAnswer)
		case "stream", "hold":
			hdr.Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			_, _ = io.WriteString(w, streamChunk)
			f.Flush()
			if r.URL.Query().Get("mode") == "hold" {
				<-r.Context().Done()
				return
			}
			for range 7 {
				_, _ = io.WriteString(w, streamChunk)
				f.Flush()
			}
			_, _ = io.WriteString(w, streamUsage)
		default:
			http.Error(w, "mode?", http.StatusBadRequest)
		}
	})
	return (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// tunedTransport is a transport sized for a proxy, as keypool serve's.
func tunedTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// serveFloor runs the floor: httputil.ReverseProxy with a tuned transport,
// putting one fixed key on every request.
func serveFloor(upstream string) error {
	target, err := url.Parse(upstream)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("listening", ln.Addr())
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set("Authorization", "Bearer sk-floor-fixed-key")
		},
		Transport:     tunedTransport(),
		FlushInterval: -1,
	}
	// Without full duplex, the server closes a request's body as the answer
	// starts; the transport's last read of it then fails and closes the
	// upstream's connection under the answer (golang/go#40747).
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		rp.ServeHTTP(w, r)
	})
	return (&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

// target is one thing measured: a proxy process, or the upstream alone.
type target struct {
	name   string
	addr   string
	pid    int // the process whose CPU and memory are measured
	client *http.Client
}

// bench builds and starts everything, measures, and prints the table.
func bench(before string, runs, nSlices, requests, streams int, pin, tsv bool) error {
	tmp, err := os.MkdirTemp("", "keypool-proxy-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	root, err := output("git", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)
	builds := []string{"after"}
	beforeRev := "none"
	if before != "" {
		if beforeRev, err = output("git", "-C", root, "rev-parse", "--short", before); err != nil {
			return err
		}
		beforeRev = strings.TrimSpace(beforeRev)
		builds = []string{"before", "after"}
		fmt.Fprintf(os.Stderr, "building keypool at %s (before)\n", beforeRev)
		if err := buildAt(root, before, filepath.Join(tmp, "src-before"), filepath.Join(tmp, "keypool-before")); err != nil {
			return err
		}
	}
	afterRev, _ := output("git", "-C", root, "describe", "--always", "--dirty")
	fmt.Fprintln(os.Stderr, "building keypool in the working tree (after)")
	if err := goBuild(root, filepath.Join(tmp, "keypool-after")); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	pinned := "no: the load generator, the upstream and the proxies share the CPUs"
	if _, err := exec.LookPath("taskset"); pin && err == nil && runtime.NumCPU() >= 2 {
		// The proxy under test and the upstream on one core, the load
		// generator alone on another: the proxy's core is the one that
		// fills, so its requests per second follow its cost.
		if out, err := exec.Command("taskset", "-a", "-p", "1", strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
			return fmt.Errorf("taskset: %v: %s", err, out)
		}
		pinned = "the load generator on CPU 0; the upstream and the proxy under test on CPU 1"
	} else {
		pin = false
	}
	start := func(name string, args ...string) (*exec.Cmd, string, error) {
		if pin {
			name, args = "taskset", append([]string{"-c", "1", name}, args...)
		}
		cmd, addr, err := startProcess(name, args...)
		if cmd != nil {
			procs = append(procs, cmd)
		}
		return cmd, addr, err
	}
	up, upAddr, err := start(self, "-role", "upstream")
	if err != nil {
		return err
	}
	upstream := &target{name: "upstream alone", addr: upAddr, pid: up.Process.Pid}
	targets := []*target{upstream}
	// The build after is measured without a line per request, as the
	// floor logs nothing, and again with one (log_level: info, its
	// default), for what the line costs; the build before had no such
	// setting and logged no request.
	type variant struct{ name, build, extra string }
	variants := []variant{{"after", "after", "log_level: warn\n"}, {"after, a line per request", "after", "log_level: info\n"}}
	if len(builds) == 2 {
		variants = append([]variant{{"before", "before", ""}}, variants...)
	}
	byName := map[string]*target{}
	for i, v := range variants {
		// max_pending_conns above the streams held at once: the memory
		// measurement opens them all in one burst, and the bound (512 by
		// default) would close the oldest before their headers are read.
		conf := filepath.Join(tmp, fmt.Sprintf("serve-%d.yaml", i))
		if err := os.WriteFile(conf, fmt.Appendf(nil, "listen: 127.0.0.1:0\nproxy_tokens: [%s]\nstate: %s\nmax_pending_conns: %d\n%supstreams:\n  - name: openai\n    url: http://%s\n"+
			"    keys: [{secret: sk-bench-1}, {secret: sk-bench-2}, {secret: sk-bench-3}, {secret: sk-bench-4}]\n",
			benchToken, filepath.Join(tmp, fmt.Sprintf("state-%d", i)), 2*streams, v.extra, upAddr), 0o600); err != nil {
			return err
		}
		cmd, addr, err := start(filepath.Join(tmp, "keypool-"+v.build), "serve", "-config", conf)
		if err != nil {
			return err
		}
		byName[v.name] = &target{name: "keypool serve, " + v.name, addr: addr, pid: cmd.Process.Pid}
		targets = append(targets, byName[v.name])
	}
	after, logged, prior := byName["after"], byName["after, a line per request"], byName["before"] // prior is nil without a build before
	floorCmd, floorAddr, err := start(self, "-role", "floor", "-upstream", "http://"+upAddr)
	if err != nil {
		return err
	}
	floor := &target{name: "ReverseProxy, one key (floor)", addr: floorAddr, pid: floorCmd.Process.Pid}
	targets = append(targets, floor)
	for _, t := range targets {
		t.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams + 64, DisableCompression: true}}
		if _, err := t.load("json", 32, 2000, false); err != nil { // warm up
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	load0 := loadavg()
	began := time.Now()

	type key struct {
		target, mode string
		c            int
	}
	rps := map[key][]float64{}
	cpu := map[key][]float64{}
	ttfb := map[string][]float64{}
	rss := map[string][]float64{}
	for run := range runs {
		for _, mode := range []string{"json", "stream"} {
			for _, c := range []int{1, 32} {
				n := requests
				if c == 1 {
					n = requests / 4
				}
				// Each target's load is cut into slices, sent in turn with
				// the others': a change in the machine's load during the
				// measurement falls on every target alike.
				took := make([]time.Duration, len(targets))
				cpus := make([]int64, len(targets))
				firstBytes := make([][]float64, len(targets))
				for slice := range nSlices {
					part := n / nSlices
					if slice == nSlices-1 {
						part = n - part*(nSlices-1)
					}
					for i := range targets {
						j := (i + run + slice) % len(targets) // each slice in another order
						t := targets[j]
						cpu0 := cpuTime(t.pid)
						m, err := t.load(mode, c, part, mode == "stream" && c == 1)
						if err != nil {
							return fmt.Errorf("%s %s C=%d: %w", t.name, mode, c, err)
						}
						took[j] += m.took
						cpus[j] += cpuTime(t.pid) - cpu0
						firstBytes[j] = append(firstBytes[j], m.firstByte...)
					}
				}
				for j, t := range targets {
					k := key{t.name, mode, c}
					rps[k] = append(rps[k], float64(n)/took[j].Seconds())
					cpu[k] = append(cpu[k], float64(cpus[j])/float64(n))
					if firstBytes[j] != nil {
						ttfb[t.name] = append(ttfb[t.name], median(firstBytes[j]))
					}
					fmt.Fprintf(os.Stderr, "round %d: %-30s %-6s C=%-2d %8.0f req/s\n", run+1, t.name, mode, c, float64(n)/took[j].Seconds())
				}
			}
		}
		for i := range targets[1:] {
			t := targets[1+(i+run)%(len(targets)-1)]
			per, err := t.holdStreams(streams)
			if err != nil {
				return fmt.Errorf("%s: %d streams: %w", t.name, streams, err)
			}
			rss[t.name] = append(rss[t.name], per)
			fmt.Fprintf(os.Stderr, "round %d: %-30s %d streams: %.1f KiB each\n", run+1, t.name, streams, per/1024)
		}
	}

	// A ratio is the median of each round's: the two were measured
	// moments apart, under the same load.
	ratio := func(a, b key) float64 {
		r := make([]float64, len(rps[a]))
		for i := range r {
			r[i] = rps[a][i] / rps[b][i]
		}
		return median(r)
	}
	direct := median(ttfb[upstream.name])
	added := median(ttfb[after.name]) - direct
	var goals []goal
	for _, mode := range []string{"json", "stream"} {
		r := ratio(key{after.name, mode, 32}, key{floor.name, mode, 32})
		goals = append(goals, goal{"proxy requests per second against a plain ReverseProxy, " + mode + ", 32 clients",
			fmt.Sprintf("%.2f×", r), "≥ 0.9× (goal 0.95×)", check(r >= 0.9)})
	}
	for _, mode := range []string{"json", "stream"} {
		r := ratio(key{logged.name, mode, 32}, key{floor.name, mode, 32})
		goals = append(goals, goal{"the same with a log line per request (log_level: info), " + mode,
			fmt.Sprintf("%.2f×", r), "", nil})
	}
	goals = append(goals, goal{"time to first byte the proxy adds to a stream, median", fmt.Sprintf("%.0f µs", added), "≤ 1 ms", check(added <= 1000)})
	goals = append(goals, goal{fmt.Sprintf("resident memory per stream in flight, %d at once", streams),
		fmt.Sprintf("%.1f KiB (floor %.1f KiB)", median(rss[after.name])/1024, median(rss[floor.name])/1024), "", nil})
	if tsv {
		for _, g := range goals {
			fmt.Printf("%s\t%s\t%s\t%s\n", g.what, g.measured, g.target, g.verdict())
		}
		return nil
	}

	fmt.Printf("keypool serve before (%s) and after (%s), %d interleaved rounds of %d slices, medians; %s, GOMAXPROCS %d, %d CPUs;\n",
		beforeRev, strings.TrimSpace(afterRev), runs, nSlices, runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Printf("pinned: %s; load average %s at the start, %s at the end; %s in all.\n\n", pinned, load0, loadavg(), time.Since(began).Round(time.Second))
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ANSWERS\tCLIENTS\tTARGET\tREQ/S\tCPU µs/REQ\tAFTER/BEFORE\tAFTER/FLOOR")
	for _, mode := range []string{"json", "stream"} {
		for _, c := range []int{1, 32} {
			for _, t := range targets {
				k := key{t.name, mode, c}
				cpuCol := fmt.Sprintf("%.0f", median(cpu[k]))
				if t == upstream {
					cpuCol = "(upstream) " + cpuCol
				}
				ratios := "\t"
				if t == after || t == logged {
					vsBefore := "-"
					if prior != nil {
						vsBefore = fmt.Sprintf("%.2f×", ratio(k, key{prior.name, mode, c}))
					}
					ratios = fmt.Sprintf("%s\t%.2f×", vsBefore, ratio(k, key{floor.name, mode, c}))
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%s\t%s\n", mode, c, t.name, median(rps[k]), cpuCol, ratios)
			}
		}
	}
	tw.Flush()
	fmt.Println()
	fmt.Printf("time to first byte of a stream, 1 client (median of the rounds' medians): upstream alone %.0f µs\n", direct)
	for _, t := range targets[1:] {
		fmt.Printf("  %-30s %6.0f µs, %+.0f µs added\n", t.name, median(ttfb[t.name]), median(ttfb[t.name])-direct)
	}
	fmt.Printf("resident memory per stream in flight, %d at once:\n", streams)
	for _, t := range targets[1:] {
		fmt.Printf("  %-30s %6.1f KiB\n", t.name, median(rss[t.name])/1024)
	}
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GOAL\tMEASURED\tTARGET\tRESULT")
	for _, g := range goals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.what, g.measured, g.target, g.verdict())
	}
	return tw.Flush()
}

// goal is one of issue 19's goals for the proxy and what was measured.
type goal struct {
	what, measured, target string
	pass                   *bool // nil: reported, no goal
}

func check(ok bool) *bool { return &ok }

func (g goal) verdict() string {
	if g.pass == nil {
		return ""
	}
	return map[bool]string{true: "pass", false: "FAIL"}[*g.pass]
}

// measurement is one load's outcome.
type measurement struct {
	took      time.Duration
	firstByte []float64 // µs from sending to the first byte of each stream's body
}

// load sends n requests for mode from c clients at once and returns how
// long they took; with firstByte it times each answer's first byte.
func (t *target) load(mode string, c, n int, firstByte bool) (measurement, error) {
	var next atomic.Int64
	var m measurement
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}]}`
	if mode == "stream" {
		body = `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say hello."}]}`
	}
	u := "http://" + t.addr + "/v1/chat/completions?mode=" + mode
	start := time.Now()
	for range c {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			for next.Add(1) <= int64(n) {
				req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+benchToken)
				req.Header.Set("Content-Type", "application/json")
				sent := time.Now()
				resp, err := t.client.Do(req)
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
				if err == nil {
					var k int
					k, err = io.ReadAtLeast(resp.Body, buf, 1)
					if firstByte && k > 0 {
						mu.Lock()
						m.firstByte = append(m.firstByte, float64(time.Since(sent).Microseconds()))
						mu.Unlock()
					}
					if err == nil {
						_, err = io.CopyBuffer(io.Discard, resp.Body, buf)
					}
					resp.Body.Close()
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	m.took = time.Since(start)
	return m, firstErr
}

// holdStreams opens n streams through the target at once, each holding
// after its first chunk, and returns the target's resident memory per
// stream in bytes: its growth from before the first to when all are open.
func (t *target) holdStreams(n int) (float64, error) {
	runtime.GC()
	time.Sleep(500 * time.Millisecond) // let the last measurement's connections settle
	base := rss(t.pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	bodies := make(chan io.Closer, n)
	for range n {
		open.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+t.addr+"/v1/chat/completions?mode=hold",
				strings.NewReader(`{"model":"gpt-4o-mini","stream":true,"messages":[]}`))
			req.Header.Set("Authorization", "Bearer "+benchToken)
			resp, err := t.client.Do(req)
			if err == nil {
				_, err = bufio.NewReader(resp.Body).ReadString('\n')
				bodies <- resp.Body
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	open.Wait()
	time.Sleep(500 * time.Millisecond) // the proxy's goroutines settle
	held := rss(t.pid)
	cancel()
	close(bodies)
	for b := range bodies {
		b.Close()
	}
	t.client.CloseIdleConnections()
	if failed.Load() > 0 {
		return 0, fmt.Errorf("%d streams failed: %v", failed.Load(), firstErr.Load())
	}
	return float64(held-base) / float64(n), nil
}

// startProcess starts a process that says where it listens — "listening
// ADDR" on its standard output, or "addr=ADDR" in its log — and returns it
// with that address.
func startProcess(name string, args ...string) (*exec.Cmd, string, error) {
	cmd := exec.Command(name, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			addr, ok := strings.CutPrefix(line, "listening ")
			if _, rest, ok2 := strings.Cut(line, "addr="); ok2 {
				addr, _, _ = strings.Cut(rest, " ")
				ok = true
			}
			if ok {
				select {
				case found <- addr:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		return cmd, addr, nil
	case <-time.After(30 * time.Second):
		return cmd, "", fmt.Errorf("%s did not start", filepath.Base(name))
	}
}

// buildAt builds keypool as it was at rev, from a copy of the tree in src.
func buildAt(root, rev, src, out string) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	archive := exec.Command("git", "-C", root, "archive", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	untar.Stderr, archive.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	if err := untar.Wait(); err != nil {
		return err
	}
	return goBuild(src, out)
}

func goBuild(dir, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/keypool")
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", dir, err, b)
	}
	return nil
}

func output(name string, args ...string) (string, error) {
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(b), nil
}

// cpuTime returns the CPU time a process has used, user and system, in
// microseconds, from /proc/PID/stat (the same count getrusage gives for the
// calling process).
func cpuTime(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	_, rest, _ := bytes.Cut(b, []byte(") ")) // past the command's name
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return (utime + stime) * 1e6 / clockTicks
}

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times: 100 on
// Linux.
const clockTicks = 100

// rss returns a process's resident memory in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}
