// Package metrics owns crijournal's Prometheus metrics: CRI operations, journal commits,
// requests that found their name in progress, resource-cache events, recovery outcomes,
// undo results and records by state. It serves them over HTTP, or HTTPS with a certificate,
// on a loopback address (the default) or a node address a cluster's Prometheus scrapes.
package metrics

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/crijournal/crijournal/journal"
)

const namespace = "crijournal"

// Metrics holds every collector. A nil *Metrics is valid and records nothing, so callers
// need no checks when metrics are off.
type Metrics struct {
	registry      *prometheus.Registry
	operations    *prometheus.CounterVec
	latency       *prometheus.HistogramVec
	commitLatency prometheus.Histogram
	commitWrites  prometheus.Histogram
	stalled       *prometheus.CounterVec
	cache         *prometheus.CounterVec
	recovery      *prometheus.CounterVec
	undos         *prometheus.CounterVec
}

// New registers every collector. records is called at each scrape to count records by
// state (nil leaves that gauge out).
func New(records func() []journal.Record) *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "cri_operations_total",
			Help: "CRI calls by method and gRPC code."}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "cri_operation_duration_seconds",
			Help: "Latency of CRI calls by method.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 20)}, []string{"method"}),
		// etcd's layout for backend commits: 1 ms to 8 s.
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "journal_commit_duration_seconds",
			Help: "Latency of journal commits (bbolt transaction with fsync).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		commitWrites: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "journal_commit_writes",
			Help: "Record writes carried by one journal commit (group commit).", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		stalled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "resources_stalled_at_stage_total",
			Help: "Requests that found their name still in progress, by kind and stage (CRI-O's resources_stalled_at_stage)."}, []string{"kind", "stage"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "resource_cache_events_total",
			Help: "Resource cache events: cached (finished after its request's deadline), claimed (returned to a retry), expired."}, []string{"kind", "event"}),
		recovery: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "recovery_records_total",
			Help: "Records handled by startup recovery, by outcome."}, []string{"outcome"}),
		undos: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "undos_total",
			Help: "Undos run, by step kind, attempt (first, or retry of an undo that failed before) and result (ok or failed)."}, []string{"step", "attempt", "result"}),
	}
	m.registry.MustRegister(m.operations, m.latency, m.commitLatency, m.commitWrites, m.stalled, m.cache, m.recovery, m.undos,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if records != nil {
		m.registry.MustRegister(&stateCollector{records: records, desc: prometheus.NewDesc(namespace+"_journal_records",
			"Journal records by kind and state.", []string{"kind", "state"}, nil)})
	}
	return m
}

// JournalHooks returns the journal hooks that feed these metrics.
func (m *Metrics) JournalHooks() journal.Hooks {
	if m == nil {
		return journal.Hooks{}
	}
	return journal.Hooks{
		Committed: func(d time.Duration, writes int) {
			m.commitLatency.Observe(d.Seconds())
			m.commitWrites.Observe(float64(writes))
		},
		Undone: func(kind journal.StepKind, retry bool, err error) {
			attempt, result := "first", "ok"
			if retry {
				attempt = "retry"
			}
			if err != nil {
				result = "failed"
			}
			m.undos.WithLabelValues(string(kind), attempt, result).Inc()
		},
		Expired: func(rec journal.Record) { m.CacheEvent(rec.Kind, "expired") },
	}
}

// Operation records one CRI call.
func (m *Metrics) Operation(method, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.operations.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

// Stalled records a request that found its name in progress at stage.
func (m *Metrics) Stalled(kind journal.Kind, stage string) {
	if m == nil {
		return
	}
	m.stalled.WithLabelValues(string(kind), stage).Inc()
}

// CacheEvent records a resource-cache event: "cached", "claimed" or "expired".
func (m *Metrics) CacheEvent(kind journal.Kind, event string) {
	if m == nil {
		return
	}
	m.cache.WithLabelValues(string(kind), event).Inc()
}

// Recovered adds n records with the given recovery outcome.
func (m *Metrics) Recovered(outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.recovery.WithLabelValues(outcome).Add(float64(n))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// TLSFiles are the PEM certificate and key of an HTTPS metrics endpoint.
type TLSFiles struct {
	CertFile, KeyFile string
}

// Serve serves the metrics on addr (host:port) until ctx ends: over HTTPS when tlsFiles is
// not nil, else plain HTTP. It returns the address actually listened on (port 0 picks one)
// once listening. The certificate is read once, here.
func (m *Metrics) Serve(ctx context.Context, addr string, tlsFiles *TLSFiles) (string, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", fmt.Errorf("metrics_address %q: %w", addr, err)
	}
	var tlsConfig *tls.Config
	if tlsFiles != nil {
		cert, err := tls.LoadX509KeyPair(tlsFiles.CertFile, tlsFiles.KeyFile)
		if err != nil {
			return "", fmt.Errorf("metrics certificate %s, key %s: %w", tlsFiles.CertFile, tlsFiles.KeyFile, err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	if tlsConfig != nil {
		lis = tls.NewListener(lis, tlsConfig)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	return lis.Addr().String(), nil
}

type stateCollector struct {
	records func() []journal.Record
	desc    *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := map[[2]string]int{}
	for _, r := range c.records() {
		counts[[2]string{string(r.Kind), string(r.State)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}
