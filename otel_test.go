package keypool

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// telemetryPool returns a pool whose spans and metrics a test can read.
func telemetryPool(t *testing.T, keys []Key, opts ...Option) (*Pool, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	opts = append(opts,
		WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
		WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	p, err := New("openai", keys, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, spans, reader
}

func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// points returns the data points of the metric named name, by their
// attributes.
func points(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		assert.Equal(t, ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = float64(p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[p.Attributes.Encoded(attribute.DefaultEncoder())] = float64(p.Count)
				}
			}
		}
	}
	return out
}

func TestTelemetrySpanPerAttempt(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	keys := []Key{{Secret: "sk-secret-one", ID: "one"}, {Secret: "sk-secret-two", ID: "two", Paid: true}}
	p, spans, _ := telemetryPool(t, keys, WithClock(clock.Now))
	v.on("sk-secret-one", rateLimited("20"))
	resp, err := (&http.Client{Transport: p.Transport(nil)}).Post(srv.URL, "application/json", strings.NewReader(`{"model":"gpt-x"}`))
	require.NoError(t, err)
	resp.Body.Close()

	ended := spans.Ended()
	require.Len(t, ended, 2, "one span per attempt")
	first, second := attrs(ended[0].Attributes()), attrs(ended[1].Attributes())
	assert.Equal(t, map[string]string{
		"keypool.provider": "openai", "keypool.key.id": "one", "keypool.key.tier": "free", "keypool.model": "gpt-x",
		"keypool.failover": "0", "keypool.outcome": "rate", "http.response.status_code": "429", "keypool.bench.seconds": "20",
	}, first)
	assert.Equal(t, map[string]string{
		"keypool.provider": "openai", "keypool.key.id": "two", "keypool.key.tier": "paid", "keypool.model": "gpt-x",
		"keypool.failover": "1", "keypool.outcome": "none", "http.response.status_code": "200",
	}, second)
	for _, s := range ended {
		assert.Equal(t, "keypool.attempt", s.Name())
		for _, kv := range s.Attributes() {
			assert.NotContains(t, kv.Value.String(), "sk-secret", "attribute %s holds a secret", kv.Key)
		}
	}
}

func TestTelemetryMetrics(t *testing.T) {
	clock := newTestClock()
	keys := []Key{{Secret: "sk-secret-a", ID: "a"}, {Secret: "sk-secret-b", ID: "b"}, {Secret: "sk-secret-c", ID: "c"}}
	p, _, reader := telemetryPool(t, keys, WithClock(clock.Now))
	fail := map[string]error{"a": &ProviderError{Kind: KindAuth, Status: 401}, "b": &ProviderError{Kind: KindRate, Status: 429, RetryAfter: time.Minute}}
	for range 3 {
		_ = p.Do(t.Context(), "m", func(_ context.Context, k Key) error { return fail[k.ID] })
	}
	assert.Equal(t, map[string]float64{
		"keypool.key.id=a,keypool.key.tier=free,keypool.outcome=auth,keypool.provider=openai": 1,
		"keypool.key.id=b,keypool.key.tier=free,keypool.outcome=rate,keypool.provider=openai": 1,
		"keypool.key.id=c,keypool.key.tier=free,keypool.outcome=none,keypool.provider=openai": 3,
	}, points(t, reader, "keypool.requests"))
	assert.Equal(t, map[string]float64{
		"keypool.bench.kind=auth,keypool.key.id=a,keypool.key.tier=free,keypool.provider=openai": 1,
		"keypool.bench.kind=rate,keypool.key.id=b,keypool.key.tier=free,keypool.provider=openai": 1,
	}, points(t, reader, "keypool.benches"))
	assert.Equal(t, map[string]float64{"keypool.provider=openai": 1}, points(t, reader, "keypool.keys.available"))
	clock.Advance(time.Minute)
	assert.Equal(t, map[string]float64{"keypool.provider=openai": 2}, points(t, reader, "keypool.keys.available"), "b is back")
	require.NoError(t, p.Unbench(t.Context(), "a"))
	assert.Equal(t, map[string]float64{"keypool.provider=openai": 3}, points(t, reader, "keypool.keys.available"), "a unbenched")
	require.NoError(t, p.Disable(t.Context(), "c", "operator"))
	assert.Equal(t, map[string]float64{"keypool.provider=openai": 2}, points(t, reader, "keypool.keys.available"), "c disabled")
	require.NoError(t, p.Enable(t.Context(), "c"))
	assert.Equal(t, map[string]float64{"keypool.provider=openai": 3}, points(t, reader, "keypool.keys.available"), "c enabled")
}

func TestTelemetryTokensAndUtilization(t *testing.T) {
	v, srv := newVendor(t)
	p, _, reader := telemetryPool(t, []Key{{Secret: "sk-secret-a", ID: "a"}}, WithLimits(Limits{TPM: 100_000}))
	v.on("sk-secret-a", answer{status: 200, header: map[string]string{
		"Content-Type": "application/json",
		"Anthropic-Ratelimit-Unified-5h-Utilization":       "0.42",
		"Anthropic-Ratelimit-Unified-5h-Reset":             "4102444800",
		"Anthropic-Ratelimit-Unified-7d-Utilization":       "0.91",
		"Anthropic-Ratelimit-Unified-7d-Reset":             "4102444800",
		"Anthropic-Ratelimit-Unified-Status":               "allowed",
		"Anthropic-Ratelimit-Unified-Representative-Claim": "seven_day",
	}, body: `{"usage":{"input_tokens":30,"output_tokens":12}}`})
	status, err := post(&http.Client{Transport: p.Transport(nil)}, srv.URL, "claude", 100)
	require.NoError(t, err)
	require.Equal(t, 200, status)
	assert.Equal(t, map[string]float64{"keypool.key.id=a,keypool.key.tier=free,keypool.provider=openai": 42},
		points(t, reader, "keypool.tokens"))
	assert.Equal(t, map[string]float64{"keypool.key.id=a,keypool.key.tier=free,keypool.provider=openai,keypool.window=weekly": 0.91},
		points(t, reader, "keypool.window.utilization"))
	last := p.Stats()[0].Last
	assert.Equal(t, WindowWeekly, last.Window)
	assert.InDelta(t, 0.91, last.Utilization, 1e-9)
}

func TestTelemetryWaitHistogram(t *testing.T) {
	p, _, reader := telemetryPool(t, []Key{{Secret: "sk-secret-a", ID: "a"}, {Secret: "sk-secret-b", ID: "b"}},
		WaitForKey(time.Second))
	require.NoError(t, p.Unbench(t.Context(), "a"))
	require.NoError(t, p.store.Bench(t.Context(), Bench{Provider: "openai", KeyID: "a", AllModels: true, Kind: KindRate, Until: time.Now().Add(50 * time.Millisecond)}))
	require.NoError(t, p.store.Bench(t.Context(), Bench{Provider: "openai", KeyID: "b", AllModels: true, Kind: KindRate, Until: time.Now().Add(time.Hour)}))
	require.NoError(t, p.Do(t.Context(), "m", func(context.Context, Key) error { return nil }))
	assert.Equal(t, map[string]float64{"keypool.provider=openai": 1}, points(t, reader, "keypool.wait.duration"))
}

// BenchmarkTelemetryWithoutSDK measures what the pool's telemetry costs a
// request when no OpenTelemetry SDK is installed: a span started and ended
// and an answer counted, through the global no-op providers.
func BenchmarkTelemetryWithoutSDK(b *testing.B) {
	p, err := New("bench", []Key{{Secret: "sk-1"}})
	if err != nil {
		b.Fatal(err)
	}
	k := p.keys[0]
	ctx := context.Background()
	v := verdict{reset: Reset{HasUtilization: true, Utilization: 0.5}}
	b.ReportAllocs()
	for b.Loop() {
		_, span := p.tel.startAttempt(ctx, k, "m", 0)
		p.tel.answered(ctx, k, &v)
		endAttempt(span, 200, v.kind, 0, nil)
	}
}

// countingTracerProvider gives tracers that count the spans started and
// start them with inner, a provider without an SDK behind it.
type countingTracerProvider struct {
	embedded.TracerProvider
	inner  trace.TracerProvider
	starts atomic.Int64
}

func (p *countingTracerProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &countingTracer{inner: p.inner.Tracer(name, opts...), starts: &p.starts}
}

type countingTracer struct {
	embedded.Tracer
	inner  trace.Tracer
	starts *atomic.Int64
}

func (t *countingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.starts.Add(1)
	return t.inner.Start(ctx, name, opts...)
}

// quietAttempt starts and ends the span of one attempt of p's first key.
func quietAttempt(p *Pool) {
	_, span := p.tel.startAttempt(context.Background(), p.keys[0], "m", 0)
	endAttempt(span, 200, KindNone, 0, nil)
}

// TestTelemetryQuietWithoutSDK holds the quiet spell of a tracer whose spans
// go nowhere: the pool asks it for no span for quietFor, then tries again.
func TestTelemetryQuietWithoutSDK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp := &countingTracerProvider{inner: tracenoop.NewTracerProvider()}
		p, err := New("test", []Key{{Secret: "sk-1"}}, WithTracerProvider(tp))
		require.NoError(t, err)
		defer p.Close()
		attempt := func() { quietAttempt(p) }
		attempt()
		assert.Equal(t, int64(1), tp.starts.Load(), "spans started by the first attempt")
		time.Sleep(quietFor - time.Millisecond)
		attempt()
		assert.Equal(t, int64(1), tp.starts.Load(), "spans started within the quiet spell")
		time.Sleep(time.Millisecond)
		attempt()
		assert.Equal(t, int64(2), tp.starts.Load(), "spans started once the quiet spell is over")
		attempt()
		assert.Equal(t, int64(2), tp.starts.Load(), "spans started in the next quiet spell")
	})
}

// TestTelemetryQuietWithGlobalProvider holds the quiet spell of the global
// tracer provider without an SDK: it lasts, with no clock read, until
// another global provider is installed.
func TestTelemetryQuietWithGlobalProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp := &countingTracerProvider{inner: tracenoop.NewTracerProvider()}
		var global trace.TracerProvider = tp
		p, err := New("test", []Key{{Secret: "sk-1"}})
		require.NoError(t, err)
		defer p.Close()
		p.tel.close()
		p.tel = newTelemetryOf(p, func() trace.TracerProvider { return global })
		attempt := func() { quietAttempt(p) }
		attempt()
		assert.Equal(t, int64(1), tp.starts.Load(), "spans started by the first attempt")
		time.Sleep(10 * quietFor)
		attempt()
		assert.Equal(t, int64(1), tp.starts.Load(), "spans started while the global provider is the same")
		global = &countingTracerProvider{inner: tracenoop.NewTracerProvider()} // another provider installed
		time.Sleep(quietFor)
		attempt()
		assert.Equal(t, int64(2), tp.starts.Load(), "spans started once another global provider is installed")
	})
}

// The limits a vendor states are measured by key and axis, once per change.
func TestTelemetryLearnedLimits(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	f := newFixture(t, WithMeterProvider(mp))
	f.vendor.on("sk-a", answer{status: 200, header: map[string]string{
		"X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Remaining-Requests": "499",
		"X-Ratelimit-Limit-Tokens": "30000", "X-Ratelimit-Remaining-Tokens": "29000"}})
	_, err := get(t, f.client, f.url)
	require.NoError(t, err)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "keypool.limit.learned" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
				axis, _ := dp.Attributes.Value("keypool.limit.axis")
				got[axis.AsString()] = dp.Value
			}
		}
	}
	assert.Equal(t, map[string]int64{"rpm": 500, "tpm": 30000}, got)
	for _, ks := range f.pool.Stats() {
		if ks.Last.Limits != (Limits{}) {
			assert.Equal(t, Limits{RPM: 500, TPM: 30000}, ks.Last.Limits, "the key's last reading names what it stated")
		}
	}
}

// A key's attribute sets are built at their first use: a pool of many keys
// holds only those of the measurements its keys made, and a first use by
// many goroutines at once keeps one set.
func TestTelemetryBuildsAKeysSetsAtFirstUse(t *testing.T) {
	keys := []Key{{Secret: "sk-secret-a", ID: "a"}, {Secret: "sk-secret-b", ID: "b"}}
	p, _, reader := telemetryPool(t, keys)
	a, b := p.keys[0], p.keys[1]
	assert.Zero(t, built(a)+built(b), "New builds no set")

	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			p.tel.used(t.Context(), a, 1) // a set of the key's attributes alone: base must not be sorted in place
			p.tel.answered(t.Context(), a, &verdict{})
		}()
	}
	for range 8 {
		<-done
	}
	assert.Equal(t, 2, built(a), "tokens and one answer of one kind: two sets")
	assert.Zero(t, built(b), "b was never measured")
	assert.Equal(t, map[string]float64{
		"keypool.key.id=a,keypool.key.tier=free,keypool.outcome=none,keypool.provider=openai": 8,
	}, points(t, reader, "keypool.requests"))
	first := a.tel.requests[KindNone].Load()
	p.tel.answered(t.Context(), a, &verdict{})
	assert.Same(t, first, a.tel.requests[KindNone].Load(), "a set is built once")
}

// built counts the attribute sets a key holds.
func built(k *poolKey) (n int) {
	for i := range k.tel.requests {
		n += btoi(k.tel.requests[i].Load() != nil) + btoi(k.tel.benches[i].Load() != nil)
	}
	for i := range k.tel.utilization {
		n += btoi(k.tel.utilization[i].Load() != nil)
	}
	for i := range k.tel.limits {
		n += btoi(k.tel.limits[i].Load() != nil)
	}
	return n + btoi(k.tel.tokens.Load() != nil)
}

// Without an SDK, or with one that records nothing, no key holds an
// attribute set: measuring costs no memory a key, whatever the keys
// answered.
func TestTelemetryWithoutSDKBuildsNoSet(t *testing.T) {
	for name, opts := range map[string][]Option{
		"global provider, no SDK": nil,
		"no-op provider":          {WithMeterProvider(noopmetric.NewMeterProvider())},
	} {
		t.Run(name, func(t *testing.T) {
			opts = append(opts, WithLimits(Limits{TPM: 1 << 30}))
			f := newFixture(t, opts...)
			f.vendor.on("sk-a", answer{status: 200, header: map[string]string{
				"X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Remaining-Requests": "499",
				"X-Ratelimit-Limit-Tokens": "30000", "X-Ratelimit-Remaining-Tokens": "29000"},
				body: `{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`})
			f.vendor.on("sk-b", answer{status: 429, header: map[string]string{"Retry-After": "30"}})
			for range 4 {
				_, err := get(t, f.client, f.url)
				require.NoError(t, err)
			}
			answered := int64(0)
			for _, k := range f.pool.keys {
				assert.Zero(t, built(k), "key %s holds attribute sets", k.ID)
				for i := range k.answers {
					answered += k.answers[i].Load()
				}
			}
			assert.Positive(t, answered, "the keys answered")
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
