package seglogprom_test

import (
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seglog/seglog/engine"
	seglogprom "github.com/seglog/seglog/metrics/prometheus"
)

// A host exposes its store's metrics on /metrics.
func ExampleNewCollector() {
	db, err := engine.Open("agent-sessions", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	prometheus.MustRegister(seglogprom.NewCollector(db))
	http.Handle("/metrics", promhttp.Handler())
	log.Fatal(http.ListenAndServe(":9090", nil))
}
