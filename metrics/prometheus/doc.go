// Package seglogprom exports an engine.DB's metrics (engine.Metrics) to
// Prometheus: a collector that reads DB.Metrics at each scrape.
//
//	db, err := engine.Open(dir, nil)
//	prometheus.MustRegister(seglogprom.NewCollector(db))
//	http.Handle("/metrics", promhttp.Handler())
//
// It lives in a module of its own (github.com/seglog/seglog/metrics/prometheus),
// so that the storage core does not depend on the Prometheus client: a host
// that does not use Prometheus pulls none of it. It imports only engine
// from seglog.
//
// Every metric is a constant one built from one snapshot per scrape
// (Collect calls DB.Metrics once), in base units (seconds, bytes), named
// seglog_* (see WithNamespace): counters end in _total, and the flush
// latency is the histogram seglog_flush_seconds. The metrics are this
// process's, as DB.Metrics's are; a host that opens several stores
// registers a collector for each, told apart by a constant label
// (WithConstLabels).
//
// A Collector is safe for concurrent use, as DB.Metrics is.
package seglogprom
