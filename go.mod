module github.com/seglog/seglog

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/google/go-cmp v0.7.0
	github.com/klauspost/compress v1.20.4
	go.etcd.io/bbolt v1.5.0
	golang.org/x/sys v0.50.0
)
