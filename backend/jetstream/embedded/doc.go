// Package embedded runs NATS servers with JetStream inside the process:
// one server, or a cluster of several, on loopback ports and a directory
// of the caller's. Tests and benchmarks of backend/jetstream use it; an
// agent host points backend/jetstream at a real cluster instead.
//
// Every server fsyncs each message before acknowledging it
// (sync_interval always), so that an acknowledged flush means stored on
// disk, as with the local engine; a production cluster of three replicas
// may relax that and rely on replication instead.
package embedded
