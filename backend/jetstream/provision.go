package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// What a stream and a lease bucket are created with, and what Open
// requires of existing ones (backend/jetstream/DESIGN.md, "Provisioning").
const (
	// defaultReplicas and defaultLeaseTTL are what Create uses when the
	// options leave them zero.
	defaultReplicas = 1
	defaultLeaseTTL = 30 * time.Second
	// createDuplicates is the duplicate window of a stream Open creates;
	// minDuplicates is the least it accepts. The window only has to
	// outlast the client's own retries of one publish (within one
	// request's time).
	createDuplicates = 2 * time.Minute
	minDuplicates    = time.Minute
	// minMsgSize is the least max_msg_size accepted (NATS's default
	// max_payload); the larger of the two bounds an event.
	minMsgSize = 1 << 20
)

// bindStream returns the stream of o, checked; it creates it if it is
// missing and o.Create is set.
func bindStream(ctx context.Context, js natsjs.JetStream, o *Options) (natsjs.Stream, error) {
	stream, err := js.Stream(ctx, o.Stream)
	if errors.Is(err, natsjs.ErrStreamNotFound) {
		if !o.Create {
			return nil, fmt.Errorf("%w: stream %s does not exist (provision it, or set Options.Create)", ErrNotProvisioned, o.Stream)
		}
		stream, err = js.CreateStream(ctx, natsjs.StreamConfig{
			Name:        o.Stream,
			Description: "seglog sessions: one subject per session, one frame per message",
			Subjects:    []string{o.Prefix + ".s.*"},
			Storage:     natsjs.FileStorage,
			Replicas:    orDefault(o.Replicas, defaultReplicas),
			Retention:   natsjs.LimitsPolicy,
			Discard:     natsjs.DiscardNew, // never drop acknowledged events to make room
			Duplicates:  createDuplicates,
			AllowRollup: true, // a Delete's tombstone purges the session's messages
			AllowDirect: true, // reads fetch a subject's messages in batches
			// The group commit's atomic batches (optional: without
			// it, a round's publishes go out one by one).
			AllowAtomicPublish: true,
		})
		if errors.Is(err, natsjs.ErrStreamNameAlreadyInUse) {
			stream, err = js.Stream(ctx, o.Stream) // another host created it meanwhile
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %s: %w", o.Stream, err)
	}
	if err := checkStream(stream.CachedInfo().Config, o); err != nil {
		return nil, err
	}
	return stream, nil
}

// checkStream returns a *ConfigError listing every setting of stream c
// that the store cannot work with.
func checkStream(c natsjs.StreamConfig, o *Options) error {
	var ms []Mismatch
	add := func(field, want, got string) { ms = append(ms, Mismatch{Field: field, Want: want, Got: got}) }
	if o.Replicas != 0 && c.Replicas != o.Replicas {
		add("replicas", strconv.Itoa(o.Replicas), strconv.Itoa(c.Replicas))
	}
	if subj := o.Prefix + ".s.*"; !coversAny(c.Subjects, subj) {
		add("subjects", fmt.Sprintf("a subject covering %q", subj), fmt.Sprintf("%q", c.Subjects))
	}
	if c.Storage != natsjs.FileStorage {
		add("storage", natsjs.FileStorage.String(), c.Storage.String())
	}
	if c.Retention != natsjs.LimitsPolicy {
		add("retention", natsjs.LimitsPolicy.String(), c.Retention.String()) // the others delete messages once consumed
	}
	if c.Discard != natsjs.DiscardNew {
		add("discard", natsjs.DiscardNew.String(), c.Discard.String()) // a full stream refuses publishes, never drops acknowledged ones
	}
	if c.MaxAge != 0 {
		add("max_age", "0 (unlimited)", c.MaxAge.String())
	}
	if c.MaxMsgsPerSubject > 0 {
		add("max_msgs_per_subject", "-1 (unlimited)", strconv.FormatInt(c.MaxMsgsPerSubject, 10))
	}
	if c.Duplicates < minDuplicates {
		add("duplicate_window", "at least "+minDuplicates.String(), c.Duplicates.String())
	}
	if c.MaxMsgSize > 0 && c.MaxMsgSize < minMsgSize {
		add("max_msg_size", fmt.Sprintf("-1 (unlimited) or at least %d", minMsgSize), strconv.Itoa(int(c.MaxMsgSize)))
	}
	if !c.AllowRollup || c.DenyPurge {
		// Delete publishes a tombstone with Nats-Rollup: sub (a stream
		// with deny_purge refuses rollups too).
		add("allow_rollup_hdrs", "true (and deny_purge false)", fmt.Sprintf("allow_rollup_hdrs %t, deny_purge %t", c.AllowRollup, c.DenyPurge))
	}
	if !c.AllowDirect {
		// Reads fetch a session's messages in batches, which only the
		// direct get does.
		add("allow_direct", "true", "false")
	}
	if c.Sealed {
		add("sealed", "false", "true")
	}
	if c.Mirror != nil {
		add("mirror", "none (a mirror refuses publishes)", c.Mirror.Name)
	}
	if ms != nil {
		return &ConfigError{Kind: "stream", Name: c.Name, Mismatches: ms}
	}
	return nil
}

// bindLeases returns the lease bucket of o, checked, and its stream's
// information (its TTL is Config.MaxAge); it creates it if it is missing
// and o.Create is set.
func bindLeases(ctx context.Context, js natsjs.JetStream, o *Options) (natsjs.KeyValue, *natsjs.StreamInfo, error) {
	kv, err := js.KeyValue(ctx, o.LeaseBucket)
	if errors.Is(err, natsjs.ErrBucketNotFound) {
		if !o.Create {
			return nil, nil, fmt.Errorf("%w: lease bucket %s does not exist (provision it, or set Options.Create)", ErrNotProvisioned, o.LeaseBucket)
		}
		ttl := orDefault(o.LeaseTTL, defaultLeaseTTL)
		kv, err = js.CreateKeyValue(ctx, natsjs.KeyValueConfig{
			Bucket:      o.LeaseBucket,
			Description: "seglog write leases",
			TTL:         ttl,
			Replicas:    orDefault(o.Replicas, defaultReplicas),
			Storage:     natsjs.FileStorage,
			History:     1,
			// Per-key TTLs (allow_msg_ttl): a session's ownership
			// record never expires; host leases expire with the TTL.
			LimitMarkerTTL: ttl,
		})
		if errors.Is(err, natsjs.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, o.LeaseBucket) // another host created it meanwhile
		}
	}
	var status natsjs.KeyValueStatus
	if err == nil {
		status, err = kv.Status(ctx)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: lease bucket %s: %w", o.LeaseBucket, err)
	}
	bs, ok := status.(*natsjs.KeyValueBucketStatus)
	if !ok {
		return nil, nil, fmt.Errorf("jetstream: lease bucket %s: no stream behind it", o.LeaseBucket)
	}
	c := bs.StreamInfo().Config
	var ms []Mismatch
	add := func(field, want, got string) { ms = append(ms, Mismatch{Field: field, Want: want, Got: got}) }
	switch {
	case c.MaxAge <= 0:
		add("ttl", "a TTL (the leases of a dead host must expire)", "none")
	case o.LeaseTTL != 0 && c.MaxAge != o.LeaseTTL:
		add("ttl", o.LeaseTTL.String(), c.MaxAge.String())
	case c.MaxAge < time.Second:
		add("ttl", "at least 1s", c.MaxAge.String())
	}
	if c.MaxMsgsPerSubject != 1 {
		add("history", "1", strconv.FormatInt(c.MaxMsgsPerSubject, 10))
	}
	if !c.AllowMsgTTL {
		// A session's ownership record is written never to expire
		// (Nats-TTL: never), the host leases expiring with the TTL.
		add("allow_msg_ttl", "true (per-key TTLs, nats-server 2.11 or later: nats kv edit <bucket> --marker-ttl <ttl>)", "false")
	}
	if c.Storage != natsjs.FileStorage {
		add("storage", natsjs.FileStorage.String(), c.Storage.String())
	}
	if o.Replicas != 0 && c.Replicas != o.Replicas {
		add("replicas", strconv.Itoa(o.Replicas), strconv.Itoa(c.Replicas))
	}
	if ms != nil {
		return nil, nil, &ConfigError{Kind: "lease bucket", Name: o.LeaseBucket, Mismatches: ms}
	}
	return kv, bs.StreamInfo(), nil
}

// orDefault returns v, or def if v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// coversAny reports whether one of the subject filters covers every
// subject that subj (which may hold wildcards) matches.
func coversAny(filters []string, subj string) bool {
	for _, f := range filters {
		if covers(f, subj) {
			return true
		}
	}
	return false
}

func covers(filter, subj string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subj, ".")
	for i, f := range ft {
		if f == ">" {
			return i < len(st)
		}
		if i >= len(st) {
			return false
		}
		if f != "*" && (f != st[i] || st[i] == "*" || st[i] == ">") {
			return false
		}
	}
	return len(ft) == len(st)
}
