// Package jetstream is the store contract (package store) over NATS
// JetStream, for agent hosts that share sessions or fail over between
// machines: the same contract as the local engine's (store.Store: Create, Open, Stat,
// List, Inspect, Fork, Delete, Resume, Flush, Close, and handle Read,
// Append, Enqueue, Flush, Wait, Close), the same errors, passing the same
// contract suite (engine/enginetest).
//
// # Layout
//
// One stream (Options.Stream, default "SEGLOG") holds every session, a
// subject per session: <prefix>.s.<base64url(id)>. A session's first
// message is its header record, the next ones batches of events; each
// message is one frame exactly as a segment file holds it (xxhash64
// checksum, zstd for batches of 1 KiB or more; segment.MarshalFrame), so a
// damaged message is reported as a *store.CorruptionError naming subject
// and stream sequence. Headers Seglog-First and Seglog-Count let a reader
// index a session's messages without decoding them; the frame is checked
// against them when it is read. A message never passes the server's
// max_payload (or the stream's max_msg_size): a batch is cut to fit, and an
// event that cannot travel alone is refused at Append and Enqueue
// (*EventTooLargeError). A write open of a stored session also
// publishes a fence: an empty message with the header Seglog-Fence (see
// Durability).
//
// # Reads
//
// A store keeps a view of each session it read (its batches' stream
// sequences). It brings it up to date by asking the stream's leader for
// the subject's last message and reading the messages after the view in
// direct batches (a direct get with next_by_subj and batch: up to 8 MiB of
// the subject's messages per request, in order, each naming the one
// before); a Read fetches its batches the same way (those the load just
// read come from memory: the newest 16 MiB of them), and decodes a long
// read on every core. A replica behind the
// leader may answer a direct get with fewer messages: the rest come from
// the leader's gets. What must be current (the last message, a message
// read back to check a duplicate acknowledgement) is always asked of the
// leader. The stream must allow direct gets (allow_direct, nats-server
// 2.11 or later). nats-server sends a direct get to any replica of the
// stream, a silent server's too: one that gets no answer within
// Options.Timeout costs the read that timeout, the read goes on with the
// leader's gets, and for 10 s the store asks only the leader
// (directQuiet in read.go says why gets go unanswered).
//
// # Following
//
// Handle.Wait sends no request while nothing happens: a store runs one
// pull consumer on the session subjects (headers only), made when a Wait
// first waits and stopped 10 s after the last; each message stored on a
// subject wakes the store's Waits on it, which then load the session. The
// store makes the consumer again, from the message after the last it
// delivered, as soon as it breaks (missed heartbeats of 500 ms, its
// deletion, a gap, a lost connection). Until the consumer runs, if it
// cannot be made (the host may not make consumers), and while it is made
// again, Waits poll the stream every 2 to 50 ms (backend/jetstream/DESIGN.md,
// Following; watch.go). A Wait whose look gets no answer in
// Options.Timeout, an answer that the cluster has no leader now (a 503,
// err_code 10008 or 10009: an election), or fails because the connection
// was lost under it, looks again. While Waits wait, the store pings its
// connection's server every 500 ms, and makes the connection reconnect
// when no PONG comes within Options.Timeout: a server that stops
// answering without closing the connection (a paused process, a hung
// machine) is otherwise noticed only by nats.go's own pings, 2 minutes
// apart by default. So a Wait sees a flush acknowledged while a server is
// silent (its own connection's, the one running the consumer) within
// Options.Timeout plus a heartbeat check (1 s) after the acknowledgement;
// if it is the stream's leader, once another is elected (nats-server's
// Raft: 4 to 9 s), plus that bound.
//
// # When a server dies
//
// Options.Timeout bounds every request, whatever the caller's deadline:
// a call whose server dies returns (a Wait looks again) within about
// Options.Timeout plus the reconnect. A server that goes silent without
// closing the connection is left by a Wait's store as above; a store
// without a waiting Wait leaves it only at nats.go's pings (the host may
// connect with a shorter nats.PingInterval). A request the host's NATS user may
// not make fails at once with a *PermissionError naming the permission
// (the server reports a permissions violation on the connection; the
// store chains the connection's error handler to see it).
//
// # Delete and Resume
//
// Delete takes the session's leases (store.ErrAlreadyOwned while a write
// handle here or elsewhere holds them) and publishes a tombstone on the
// subject: the tombstone frame of a segment file (the id and the
// incarnation it ends) with the header Nats-Rollup: sub, so the stream
// purges the subject's earlier messages as it stores it, expecting the last
// message read under the leases, so that no publish of an earlier writer
// lands after it. A subject whose last message is a tombstone holds no
// session: Stat and Open fail with store.ErrSessionNotFound on every host,
// List skips it, a read handle's Read and Wait fail with
// store.ErrSessionNotFound, and Create starts a new incarnation after the
// tombstone. A host that dies once the tombstone is stored leaves the
// session deleted; only its lease of the id lives on until it expires. The
// stream must allow rollups (allow_rollup_hdrs; see Provisioning). With
// store.IfRevision, Delete deletes only the revision named, as read
// under the leases. Resume is a write open and storekit.Turns.Resume: the
// closers of recovery.Closers of the open turn, the same as the local
// engine's.
//
// A tombstone stays, the subject's only message, until the id is created
// again. PurgeTombstones (store.TombstonePurger, called by store.Retain
// and seglog retain) purges those older than a grace period, each under
// the id's leases and only if it is still the subject's last message:
// revisions stay new (incarnation ids are random), and an old writer's
// late publish still finds the subject ending in another message than it
// expects, save a header expecting an empty subject, which the grace
// period outlasts (docs/DESIGN.md, Copy and retention). store.Copy copies
// sessions between a stream and a local store (or another stream).
//
// # Provisioning
//
// The stream and the lease bucket are shared by every host and made once,
// by an operator or by the first Open with Options.Create. Open binds to
// them and never changes them: a missing one is ErrNotProvisioned (unless
// Create), and one whose settings the store cannot work with is a
// *ConfigError listing every difference (backend/jetstream/DESIGN.md, Provisioning,
// lists the settings and the permissions a host needs; among them
// allow_rollup_hdrs, which a stream made before Delete lacks, and
// allow_direct, which one made before batched reads lacks).
//
// # Ownership
//
// A write handle holds two leases: this process's (handle.Owners, as the
// local engine) and the session's ownership record in a JetStream
// key-value bucket (Options.LeaseBucket). The record names the store's
// host lease: one key per store, renewed every third of Options.LeaseTTL
// (one write however many sessions the store holds; the bucket expires it
// after the TTL unless renewed), and the session is owned while that host
// lease lives. Renewal is an update at the last revision, so a store whose
// host lease expired cannot renew it, and loses every session held under
// it. Another store takes a session over only once the host lease its
// record names is proven dead (gone from the bucket, which a write
// expecting it gone proves, or marked dead by such a write). A store whose
// renewals fail (time out) stops writing once its host lease may have
// expired: a tenth of the TTL before the last successful write of it plus
// the TTL; from then on until a renewal succeeds, a write open, Create and
// Delete fail with store.ErrOwnershipLost too, publishing nothing. Every publish also carries the stream sequence of the last
// message it knows on the session's subject
// (Nats-Expected-Last-Subject-Sequence): two writers can never interleave
// batches, and the one that lost gets store.ErrOwnershipLost.
//
// By default Options.Host is unique to the process, and a dead process's
// sessions stay locked until its host lease expires. A Host set by the
// caller lets a restarted store take its dead predecessor's leases over at
// once: the store holds a lock file for its Host (Options.LockDir) while
// open, which proves that no other store of that Host runs on the machine
// (a second one fails to open with store.ErrLocked); leases of the same
// Host held on another machine are taken over only once their host lease
// is proven dead, like any other.
//
// # Durability
//
// Append is best-effort: the events are visible to reads through this
// instance at once and published when a batch fills or at Flush. A Flush
// returns nil once every publish of the session was acknowledged by the
// stream: stored on a quorum of Options.Replicas servers. (A single server
// fsyncs a message before it acknowledges it only with sync_interval
// always; the embedded servers of package embedded are configured so.) A
// publish that fails has an unknown outcome: the session's handle is
// poisoned, never retries it, and every later Flush fails; a new write
// open reads what the stream kept, and fences the subject: it publishes a
// fence message expecting the last message it read, so that no publish
// the earlier writer started can land after it (each expects an older
// message). Message ids are the write open's random name and the
// message's first seq: they make the client's own retries of one publish
// idempotent and never match another writer's message (a replicated
// stream checks the id before the expected sequence); an acknowledgement
// as a duplicate is taken only once the stored message is read back and
// is this one.
//
// Group commit: the publishes of all sessions waiting at the same time go
// out together, as one atomic batch if the stream allows it (one fsync on
// a single server, one proposal on a replicated stream), else as pipelined
// asynchronous publishes. Each keeps its id, expectation and outcome: a
// batch the stream refuses stored nothing, and its publishes go again one
// by one, so that a refusal fails only its own session; a batch without a
// response poisons every session in it.
//
// # Imports
//
// It imports engine (types, errors and session rules), event, segment
// (frame encoding), handle (leases, write-behind) and nats.go; nothing
// imports it but tests, benchmarks and the CLI. It is a module of its own,
// github.com/seglog/seglog/backend/jetstream (with package embedded), so
// that the core module does not depend on NATS (docs/DESIGN.md#modules).
package jetstream
