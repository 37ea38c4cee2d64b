// Package chart draws benchmark results as PNG images with gonum/plot:
// grouped bars (a value per group and series, the series side by side:
// workloads of `seglog bench`, peers of bench/peers) and latency
// distributions (a line per run: the share of operations done within a
// latency, from bench.Result.Latency). `seglog bench -plot` and
// `bench/peers -plot` use it.
//
// chart is a module of its own, github.com/seglog/seglog/bench/chart, so
// that the core module (the engine, the bench workloads and everything
// under them) does not depend on gonum/plot; the CLI and bench/peers
// require it (internal/lint checks; docs/DESIGN.md#modules). It may import
// bench and what bench may; nothing but commands imports chart. See
// docs/DESIGN.md#layering.
package chart
