package keypool

import (
	"context"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the pool's spans and metrics.
const ScopeName = "github.com/keypool-go/keypool"

// Version is the version of keypool the scope reports.
const Version = "0.1.0"

// The attributes of the pool's spans and metrics. None ever holds a secret.
const (
	attrProvider = attribute.Key("keypool.provider")
	attrModel    = attribute.Key("keypool.model")
	attrKeyID    = attribute.Key("keypool.key.id")
	attrTier     = attribute.Key("keypool.key.tier")
	attrOutcome  = attribute.Key("keypool.outcome")
	attrKind     = attribute.Key("keypool.bench.kind")
	attrBench    = attribute.Key("keypool.bench.seconds")
	attrFailover = attribute.Key("keypool.failover")
	attrWindow   = attribute.Key("keypool.window")
	attrAxis     = attribute.Key("keypool.limit.axis")
	attrStatus   = attribute.Key("http.response.status_code")
)

// telemetry holds a pool's tracer and instruments, built once in New.
type telemetry struct {
	tracer    trace.Tracer
	startOpts []trace.SpanStartOption
	// quietUntil, in nanoseconds since epoch on the monotonic clock, is
	// when to try starting spans again after the tracer gave a span that
	// goes nowhere: without an SDK, the global provider's spans cost
	// allocations and record nothing. The monotonic clock alone is read,
	// which costs about half a wall-clock reading.
	epoch      time.Time
	quietUntil atomic.Int64
	// global is the global tracer provider the tracer came from, when the
	// pool was given none and that provider is a pointer; globalProvider
	// reads the global provider now (otel.GetTracerProvider, a test's
	// stand-in). While a quiet spell began with the global provider the
	// same (quietGlobal), the spell lasts until another is installed, and
	// no clock is read.
	global         trace.TracerProvider
	globalProvider func() trace.TracerProvider
	quietGlobal    atomic.Bool

	requests    metric.Int64Counter
	benches     metric.Int64Counter
	tokens      metric.Int64Counter
	spend       metric.Float64Counter
	limit       metric.Int64Gauge
	utilization metric.Float64Gauge
	waited      metric.Float64Histogram
	waitOpts    []metric.RecordOption
	reg         metric.Registration
}

// keyTelemetry is one key's attribute sets. Each is built at its first use,
// once: measuring a request allocates nothing, and a key holds only the sets
// it was measured with (building every set of every key in New cost a pool
// of 100,000 keys 7 KiB and 24 µs a key). No set is built for an instrument
// that records nothing (Enabled false: no SDK, or a view drops it), so a
// pool without an SDK holds none.
type keyTelemetry struct {
	span        []attribute.KeyValue // provider, key ID, tier; the base of every set
	requests    [len(kindNames)]atomic.Pointer[[]metric.AddOption]
	benches     [len(kindNames)]atomic.Pointer[[]metric.AddOption]
	tokens      atomic.Pointer[[]metric.AddOption]
	utilization [len(measuredWindows)]atomic.Pointer[[]metric.RecordOption]
	limits      [len(axisNames)]atomic.Pointer[[]metric.RecordOption]
	// stated holds the limits last recorded, by axis, so that an answer
	// restating them records nothing.
	stated [len(axisNames)]atomic.Int64
}

// The windows utilization is measured for, and the axes of learned limits.
var (
	measuredWindows = [...]Window{WindowNone, Window5h, WindowDaily, WindowWeekly, WindowMonthly}
	axisNames       = [...]string{"rpm", "rpd", "tpm", "tpd"}
)

// measurement returns the options of a measurement with the attributes base
// and extra, held in slot: built and kept at its first use. T is
// metric.AddOption or metric.RecordOption.
func measurement[T any](slot *atomic.Pointer[[]T], base []attribute.KeyValue, extra ...attribute.KeyValue) []T {
	if o := slot.Load(); o != nil {
		return *o
	}
	// A copy: NewSet sorts what it is given in place, and base is shared.
	attrs := append(append(make([]attribute.KeyValue, 0, len(base)+len(extra)), base...), extra...)
	set := attribute.NewSet(attrs...)
	o := []T{any(metric.WithAttributeSet(set)).(T)} // a MeasurementOption: an AddOption and a RecordOption
	if !slot.CompareAndSwap(nil, &o) {
		return *slot.Load()
	}
	return o
}

// windowLabel names a window in metrics; the empty Window is a short one.
func windowLabel(w Window) string {
	if w == WindowNone {
		return "short"
	}
	return string(w)
}

// newTelemetry builds the pool's tracer and instruments from the providers in
// c, or the global ones. An instrument that cannot be built is reported to
// otel.Handle and left a no-op.
func newTelemetry(p *Pool) *telemetry {
	return newTelemetryOf(p, otel.GetTracerProvider)
}

// newTelemetryOf is newTelemetry with the global tracer provider read by
// globalProvider.
func newTelemetryOf(p *Pool, globalProvider func() trace.TracerProvider) *telemetry {
	tp, mp := p.cfg.tracerProvider, p.cfg.meterProvider
	t := &telemetry{epoch: time.Now(), globalProvider: globalProvider}
	if tp == nil {
		tp = globalProvider()
		if reflect.TypeOf(tp).Kind() == reflect.Pointer {
			t.global = tp // compared with ==, which only a comparable type survives
		}
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	t.tracer = tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
	t.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	var err error
	handle := func(e error) {
		if e != nil {
			otel.Handle(e)
		}
	}
	t.requests, err = m.Int64Counter("keypool.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Answers the vendor gave, by key and outcome kind."))
	handle(err)
	t.benches, err = m.Int64Counter("keypool.benches", metric.WithUnit("{bench}"),
		metric.WithDescription("Keys set aside, by key and kind."))
	handle(err)
	t.tokens, err = m.Int64Counter("keypool.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens the vendor reported used, by key."))
	handle(err)
	t.spend, err = m.Float64Counter("keypool.spend", metric.WithUnit("USD"),
		metric.WithDescription("What requests cost, by the prices the pool was given, by key and model."))
	handle(err)
	t.limit, err = m.Int64Gauge("keypool.limit.learned", metric.WithUnit("{request}"),
		metric.WithDescription("The limits a key's vendor last stated, by key and axis (rpm, rpd, tpm, tpd; tokens for the last two)."))
	handle(err)
	t.utilization, err = m.Float64Gauge("keypool.window.utilization", metric.WithUnit("1"),
		metric.WithDescription("The share of its window a key has used, as the vendor last reported it."))
	handle(err)
	t.waited, err = m.Float64Histogram("keypool.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a request waited for a key."))
	handle(err)
	t.waitOpts = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrProvider.String(p.provider)))}
	available, err := m.Int64ObservableGauge("keypool.keys.available", metric.WithUnit("{key}"),
		metric.WithDescription("Keys not benched for any model."))
	handle(err)
	if err == nil {
		set := metric.WithAttributeSet(attribute.NewSet(attrProvider.String(p.provider)))
		t.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
			o.ObserveInt64(available, int64(p.available(p.cfg.clock())), set)
			return nil
		}, available)
		handle(err)
	}
	return t
}

// keyAttributes returns the attributes every measurement of a key carries.
func keyAttributes(provider string, k *poolKey) []attribute.KeyValue {
	tier := "free"
	if k.Paid {
		tier = "paid"
	}
	return []attribute.KeyValue{attrProvider.String(provider), attrKeyID.String(k.ID), attrTier.String(tier)}
}

// quietFor is how long the pool skips starting spans after a span went
// nowhere, when its tracer came from a provider it was given; a tracer
// installed later is used from then on. A tracer of the global provider is
// skipped until another global provider is installed.
const quietFor = time.Second

// startAttempt starts the span of one attempt. When the tracer has no SDK
// behind it (its span has no valid context), it skips tracing for a while
// (see quietFor) and returns a no-op span that allocates nothing.
func (t *telemetry) startAttempt(ctx context.Context, k *poolKey, model string, attempt int) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		if t.quietGlobal.Load() && t.globalProvider() == t.global {
			return ctx, parent // the no-op span of a context without one
		}
		if time.Since(t.epoch).Nanoseconds() < t.quietUntil.Load() {
			return ctx, parent
		}
	}
	sctx, span := t.tracer.Start(ctx, "keypool.attempt", t.startOpts...)
	if !span.SpanContext().IsValid() && !span.IsRecording() {
		t.quietUntil.Store((time.Since(t.epoch) + quietFor).Nanoseconds())
		if t.global != nil && t.globalProvider() == t.global {
			t.quietGlobal.Store(true)
		}
		return sctx, span
	}
	if span.IsRecording() {
		span.SetAttributes(k.tel.span...)
		span.SetAttributes(attrModel.String(model), attrFailover.Int(attempt))
	}
	return sctx, span
}

// Attempt is one attempt of a request on a key, as OnAttempt hears of it once
// the key's answer is judged, or once the attempt ended without one.
type Attempt struct {
	Provider, KeyID, Model string
	// Failover counts the keys the request tried before this one: 0 for
	// its first attempt.
	Failover int
	// Status is the answer's HTTP status; 0 when the attempt ended with
	// no answer (a network error, the caller's context), which Failed
	// says. Pool.Do's attempts have no status.
	Status int
	Failed bool
	// Kind is what the answer came to; Bench how long it benched the key
	// (0 for none).
	Kind  Kind
	Bench time.Duration
}

// attempted ends an attempt's span with its outcome and tells OnAttempt.
func (p *Pool) attempted(ctx context.Context, span trace.Span, a Attempt, err error) {
	endAttempt(span, a.Status, a.Kind, a.Bench, err)
	p.tellAttempt(ctx, a, err != nil)
}

// tellAttempt tells OnAttempt of attempt a, which failed with no answer
// when failed.
func (p *Pool) tellAttempt(ctx context.Context, a Attempt, failed bool) {
	if f := p.cfg.onAttempt; f != nil {
		a.Provider, a.Failed = p.provider, failed
		f(ctx, a)
	}
}

// Settlement is what one answer used, as OnSettle (and NotifySettle) hear
// of it once the pool has counted it: the tokens, input and output
// together, within what the request could have used, and, for
// NotifySettle, what they cost at the model's price (WithPrices), in
// millionths of a US dollar — 0 without a price (OnSettle leaves it 0).
type Settlement struct {
	Provider, KeyID, Model string
	Tokens                 int64
	Cost                   int64
}

// counted counts the tokens an answer of key k for model reported, and
// tells OnSettle.
func (p *Pool) counted(ctx context.Context, k *poolKey, model string, tokens int64) {
	p.tel.used(ctx, k, tokens)
	if f := p.cfg.onSettle; f != nil {
		f(Settlement{Provider: p.provider, KeyID: k.ID, Model: model, Tokens: tokens})
	}
}

// benchLength returns how long a bench that ends at until holds from now:
// 0 for none (a zero until). Most answers bench nothing, and time.Sub is no
// small sum.
func benchLength(until, now time.Time) time.Duration {
	if until.IsZero() {
		return 0
	}
	return max(until.Sub(now), 0)
}

// endAttempt ends an attempt's span with its outcome.
func endAttempt(span trace.Span, status int, kind Kind, bench time.Duration, err error) {
	if span.IsRecording() {
		span.SetAttributes(attrOutcome.String(kind.String()))
		if status != 0 {
			span.SetAttributes(attrStatus.Int(status))
		}
		if bench > 0 {
			span.SetAttributes(attrBench.Float64(bench.Seconds()))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// answered counts one answer of a key and what it said.
func (t *telemetry) answered(ctx context.Context, k *poolKey, v *verdict) {
	kt := &k.tel
	if t.requests.Enabled(ctx) {
		t.requests.Add(ctx, 1, measurement(&kt.requests[v.kind], kt.span, attrOutcome.String(v.kind.String()))...)
	}
	if v.reset.HasUtilization && t.utilization.Enabled(ctx) {
		if i := slices.Index(measuredWindows[:], v.reset.Window); i >= 0 {
			opts := measurement(&kt.utilization[i], kt.span, attrWindow.String(windowLabel(v.reset.Window)))
			t.utilization.Record(ctx, v.reset.Utilization, opts...)
		}
	}
}

// benched counts a bench of a key.
func (t *telemetry) benched(ctx context.Context, k *poolKey, kind Kind) {
	if !t.benches.Enabled(ctx) {
		return
	}
	t.benches.Add(ctx, 1, measurement(&k.tel.benches[kind], k.tel.span, attrKind.String(kind.String()))...)
}

// used counts the tokens a key's answer reported.
func (t *telemetry) used(ctx context.Context, k *poolKey, tokens int64) {
	if !t.tokens.Enabled(ctx) {
		return
	}
	t.tokens.Add(ctx, tokens, measurement(&k.tel.tokens, k.tel.span)...)
}

// learned records the limits an answer stated for a key, those that
// changed since it last recorded them.
func (t *telemetry) learned(ctx context.Context, k *poolKey, l Limits) {
	if !t.limit.Enabled(ctx) {
		return
	}
	for i, v := range [...]int64{l.RPM, l.RPD, l.TPM, l.TPD} {
		// A vendor states the same limits on every answer: only a change
		// writes, so the common answer reads.
		if v > 0 && k.tel.stated[i].Load() != v && k.tel.stated[i].Swap(v) != v {
			t.limit.Record(ctx, v, measurement(&k.tel.limits[i], k.tel.span, attrAxis.String(axisNames[i]))...)
		}
	}
}

// spent counts what a key's request cost, in millionths of a dollar.
func (t *telemetry) spent(ctx context.Context, k *poolKey, model string, micros int64) {
	if micros <= 0 || !t.spend.Enabled(ctx) {
		return
	}
	attrs := append(k.tel.span[:len(k.tel.span):len(k.tel.span)], attrModel.String(model))
	t.spend.Add(ctx, fromMicros(micros), metric.WithAttributes(attrs...))
}

// wait records how long a request waited for a key.
func (t *telemetry) wait(ctx context.Context, d time.Duration) {
	t.waited.Record(ctx, d.Seconds(), t.waitOpts...)
}

// close unregisters the observable gauge.
func (t *telemetry) close() {
	if t.reg != nil {
		_ = t.reg.Unregister()
	}
}
