package seglogprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seglog/seglog/engine"
)

// Source is what a Collector reads: *engine.DB is one.
type Source interface {
	Metrics() engine.Metrics
}

// Option configures NewCollector.
type Option func(*config)

type config struct {
	namespace string
	labels    prometheus.Labels
}

// WithNamespace replaces the metric names' prefix, "seglog".
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithConstLabels adds labels to every metric, e.g. {"store": "sessions"}
// to tell the stores of one process apart.
func WithConstLabels(l prometheus.Labels) Option {
	return func(c *config) { c.labels = l }
}

// Collector is a prometheus.Collector of one DB's metrics.
type Collector struct {
	src Source

	appends, eventsAppended, appendedBytes               *prometheus.Desc
	flushes, flushErrors, flushSeconds, fsyncs           *prometheus.Desc
	windowFlushes, windowFlushErrors                     *prometheus.Desc
	eventsWritten, writtenBytes, frames, frameBytes      *prometheus.Desc
	wbEvents, wbFailures                                 *prometheus.Desc
	checkpoints, checkpointFailures                      *prometheus.Desc
	lagFrames, lagBytes, lagSeconds                      *prometheus.Desc
	compactions, compactionFailures, segments, reclaimed *prometheus.Desc
	handles, poisoned                                    *prometheus.Desc
}

// NewCollector returns a Collector of db's metrics (register it once:
// prometheus.MustRegister(seglogprom.NewCollector(db))).
func NewCollector(db Source, opts ...Option) *Collector {
	cfg := config{namespace: "seglog"}
	for _, o := range opts {
		o(&cfg)
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(cfg.namespace, "", name), help, labels, cfg.labels)
	}
	return &Collector{
		src:               db,
		appends:           d("appends_total", "Batches of events staged into sessions: Append calls with events, and writes of write-behind batches."),
		eventsAppended:    d("events_appended_total", "Events staged into sessions."),
		appendedBytes:     d("appended_bytes_total", "Bytes of the appended events' data (and surfaceOp)."),
		flushes:           d("flushes_total", "Flush barriers (Handle.Flush, DB.Flush) that returned, failed ones included."),
		flushErrors:       d("flush_errors_total", "Flushes that returned an error."),
		flushSeconds:      d("flush_seconds", "Time a flush took, from its call to its return."),
		windowFlushes:     d("window_flushes_total", "Background flushes at the end of a write handle's durability window (WriteBehindWindow), not counted in flushes_total."),
		windowFlushErrors: d("window_flush_errors_total", "Window flushes that returned an error (the next Flush writes the events or returns it)."),
		fsyncs:            d("fsyncs_total", "Group-commit fdatasyncs of the active segment (one covers every flush waiting at that moment)."),
		eventsWritten:     d("events_written_total", "Events in the frames written into segments."),
		writtenBytes:      d("written_bytes_total", "Bytes of the frames written into segments (headers, keys, stored payloads, padding)."),
		frames:            d("frames_total", "Frames written into segments, by the codec of their payload.", "codec"),
		frameBytes:        d("frame_bytes_total", "Payload bytes of the frames written, by codec, before (kind=raw) and after (kind=stored) compression.", "codec", "kind"),
		wbEvents:          d("writebehind_queue_events", "Events enqueued (write-behind) and not yet appended."),
		wbFailures:        d("writebehind_failures_total", "Background writes of write-behind batches that failed (their events stay buffered)."),
		checkpoints:       d("index_checkpoints_total", "Index checkpoints committed."),
		checkpointFailures: d("index_checkpoint_failures_total",
			"Index checkpoints that failed (their frames wait for the next)."),
		lagFrames: d("index_checkpoint_lag_frames", "Frames written that the index does not hold yet."),
		lagBytes:  d("index_checkpoint_lag_bytes", "Bytes of the frames the index does not hold yet."),
		lagSeconds: d("index_checkpoint_lag_seconds",
			"While frames wait for the index, the time since it last caught up; 0 while none waits."),
		compactions:        d("compactions_total", "Compactions run to the end."),
		compactionFailures: d("compaction_failures_total", "Compactions that failed."),
		segments:           d("compaction_segments_total", "Segments compactions removed (action=dropped) or rewrote without their dead frames (action=rewritten).", "action"),
		reclaimed:          d("compaction_reclaimed_bytes_total", "Bytes compactions freed."),
		handles:            d("open_handles", "Session handles open, by access.", "access"),
		poisoned:           d("poisoned", "1 once an fsync failed or shm was found cut under the process, and the store accepts nothing more until it is reopened, else 0."),
	}
}

// Describe sends the descriptors of every metric the Collector makes.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.appends, c.eventsAppended, c.appendedBytes,
		c.flushes, c.flushErrors, c.flushSeconds, c.fsyncs,
		c.windowFlushes, c.windowFlushErrors,
		c.eventsWritten, c.writtenBytes, c.frames, c.frameBytes,
		c.wbEvents, c.wbFailures,
		c.checkpoints, c.checkpointFailures,
		c.lagFrames, c.lagBytes, c.lagSeconds,
		c.compactions, c.compactionFailures, c.segments, c.reclaimed,
		c.handles, c.poisoned,
	} {
		ch <- d
	}
}

// Collect reads one snapshot of the DB's metrics and sends them.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	m := c.src.Metrics()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.appends, m.Appends)
	counter(c.eventsAppended, m.EventsAppended)
	counter(c.appendedBytes, m.BytesAppended)
	counter(c.flushes, m.Flushes)
	counter(c.flushErrors, m.FlushErrors)
	counter(c.windowFlushes, m.WindowFlushes)
	counter(c.windowFlushErrors, m.WindowFlushErrors)
	counter(c.fsyncs, m.Fsyncs)
	counter(c.eventsWritten, m.EventsWritten)
	counter(c.writtenBytes, m.BytesWritten)

	// engine's counts are per bucket; Prometheus's are cumulative.
	h := m.FlushLatency
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		cum += h.Counts[i]
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.flushSeconds, h.Count, h.Sum.Seconds(), buckets)

	for _, f := range []struct {
		codec string
		n     engine.FrameCounts
	}{{"none", m.Frames.None}, {"zstd", m.Frames.Zstd}, {"zstd_dict", m.Frames.ZstdDict}, {"s2", m.Frames.S2}, {"s2_dict", m.Frames.S2Dict}} {
		counter(c.frames, f.n.Frames, f.codec)
		counter(c.frameBytes, f.n.RawBytes, f.codec, "raw")
		counter(c.frameBytes, f.n.StoredBytes, f.codec, "stored")
	}

	gauge(c.wbEvents, float64(m.WriteBehindEvents))
	counter(c.wbFailures, m.WriteBehindFailures)

	counter(c.checkpoints, m.IndexCheckpoints)
	counter(c.checkpointFailures, m.IndexCheckpointFailures)
	gauge(c.lagFrames, float64(m.IndexLagFrames))
	gauge(c.lagBytes, float64(m.IndexLagBytes))
	gauge(c.lagSeconds, m.IndexLagAge.Seconds())

	counter(c.compactions, m.Compactions)
	counter(c.compactionFailures, m.CompactionFailures)
	counter(c.segments, m.SegmentsDropped, "dropped")
	counter(c.segments, m.SegmentsRewritten, "rewritten")
	counter(c.reclaimed, m.CompactionReclaimedBytes)

	gauge(c.handles, float64(m.ReadHandles), "read")
	gauge(c.handles, float64(m.WriteHandles), "write")
	poisoned := 0.0
	if m.Poisoned {
		poisoned = 1
	}
	gauge(c.poisoned, poisoned)
}
