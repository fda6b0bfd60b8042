package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// The proxy's telemetry setup, the one place the command meets an
// OpenTelemetry SDK: its pools' metrics (and its own) go to a Prometheus
// registry that /metrics serves. What the pools did with a request comes
// from their hooks (OnAttempt, OnEvict), never from their telemetry.

// meterProvider is the proxy's meter provider, which it shuts down.
type meterProvider interface {
	metric.MeterProvider
	Shutdown(ctx context.Context) error
}

// newMetrics returns the meter provider of the proxy's pools and the
// handler of /metrics that serves what they measure.
func newMetrics() (meterProvider, http.Handler, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), nil
}
