package jetstream

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/store"
)

// provision makes o's stream and lease bucket as an operator would, with
// the settings the store needs and a few of the operator's own (a
// description, a 5-minute duplicate window, a 10 s lease TTL), changed by
// editStream and editKV if not nil. It returns both configurations as the
// server holds them.
func provision(t *testing.T, js natsjs.JetStream, o *Options, editStream func(*natsjs.StreamConfig), editKV func(*natsjs.KeyValueConfig)) (natsjs.StreamConfig, natsjs.StreamConfig) {
	t.Helper()
	ctx := context.Background()
	sc := natsjs.StreamConfig{
		Name:        o.Stream,
		Description: "provisioned by the operator",
		Subjects:    []string{o.Prefix + ".s.*"},
		Storage:     natsjs.FileStorage,
		Retention:   natsjs.LimitsPolicy,
		Discard:     natsjs.DiscardNew,
		Duplicates:  5 * time.Minute,
		Replicas:    1,
		AllowRollup: true,
		AllowDirect: true,
	}
	if editStream != nil {
		editStream(&sc)
	}
	if _, err := js.CreateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	kc := natsjs.KeyValueConfig{Bucket: o.LeaseBucket, TTL: 10 * time.Second, History: 1, Storage: natsjs.FileStorage, Replicas: 1, LimitMarkerTTL: 10 * time.Second}
	if editKV != nil {
		editKV(&kc)
	}
	if _, err := js.CreateKeyValue(ctx, kc); err != nil {
		t.Fatal(err)
	}
	return configs(t, js, o)
}

// configs returns the stream's and the lease bucket's configurations.
func configs(t *testing.T, js natsjs.JetStream, o *Options) (natsjs.StreamConfig, natsjs.StreamConfig) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, o.Stream)
	if err != nil {
		t.Fatal(err)
	}
	k, err := js.Stream(ctx, "KV_"+o.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config, k.CachedInfo().Config
}

func newJS(t *testing.T) natsjs.JetStream {
	t.Helper()
	js, err := natsjs.New(connect(t, srvURL))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Without Options.Create, a missing stream or bucket fails Open with
// ErrNotProvisioned, and nothing is created.
func TestOpenNotProvisioned(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	o := freshOptions()
	o.Create = false
	_, err := Open(ctx, connect(t, srvURL), o)
	if !errors.Is(err, ErrNotProvisioned) {
		t.Fatalf("Open without a stream: %v, want ErrNotProvisioned", err)
	}
	t.Logf("reported: %v", err)
	if _, err := js.Stream(ctx, o.Stream); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("the stream after the failed Open: %v, want not found", err)
	}
	// The stream alone: the bucket is missing.
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: o.Stream, Subjects: []string{o.Prefix + ".s.*"}, Discard: natsjs.DiscardNew, AllowRollup: true, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, connect(t, srvURL), o)
	if !errors.Is(err, ErrNotProvisioned) {
		t.Fatalf("Open without a lease bucket: %v, want ErrNotProvisioned", err)
	}
	if _, err := js.KeyValue(ctx, o.LeaseBucket); !errors.Is(err, natsjs.ErrBucketNotFound) {
		t.Errorf("the bucket after the failed Open: %v, want not found", err)
	}
}

// A store binds to a provisioned stream and bucket without changing them,
// and takes its lease TTL from the bucket when Options.LeaseTTL is zero.
func TestOpenBinds(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	o := freshOptions()
	o.Create = false
	wantS, wantK := provision(t, js, o, nil, nil)
	st := openStore(t, o)
	if st.opts.LeaseTTL != 10*time.Second {
		t.Errorf("lease TTL %v, want the bucket's 10s", st.opts.LeaseTTL)
	}
	h, err := st.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// A store with Create set binds to them just the same.
	o2 := *o
	o2.Create, o2.Host = true, "other"
	openStore(t, &o2)
	gotS, gotK := configs(t, js, o)
	if !reflect.DeepEqual(gotS, wantS) {
		t.Errorf("the stream's configuration changed:\n got %+v\nwant %+v", gotS, wantS)
	}
	if !reflect.DeepEqual(gotK, wantK) {
		t.Errorf("the bucket's configuration changed:\n got %+v\nwant %+v", gotK, wantK)
	}
}

// A stream or bucket whose settings are not the store's fails Open with a
// *ConfigError naming the setting, and is left as it was.
func TestOpenMismatch(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	for _, c := range []struct {
		name       string
		editStream func(*natsjs.StreamConfig)
		editKV     func(*natsjs.KeyValueConfig)
		opts       func(*Options)
		kind       string
		field      string
	}{
		{name: "replicas", opts: func(o *Options) { o.Replicas = 3 }, kind: "stream", field: "replicas"},
		{name: "lease TTL", opts: func(o *Options) { o.LeaseTTL = 20 * time.Second }, kind: "lease bucket", field: "ttl"},
		{name: "memory storage", editStream: func(c *natsjs.StreamConfig) { c.Storage = natsjs.MemoryStorage }, kind: "stream", field: "storage"},
		{name: "work queue", editStream: func(c *natsjs.StreamConfig) { c.Retention = natsjs.WorkQueuePolicy }, kind: "stream", field: "retention"},
		{name: "discard old", editStream: func(c *natsjs.StreamConfig) { c.Discard = natsjs.DiscardOld }, kind: "stream", field: "discard"},
		{name: "max age", editStream: func(c *natsjs.StreamConfig) { c.MaxAge = time.Hour }, kind: "stream", field: "max_age"},
		{name: "per-subject limit", editStream: func(c *natsjs.StreamConfig) { c.MaxMsgsPerSubject = 100 }, kind: "stream", field: "max_msgs_per_subject"},
		{name: "other subjects", editStream: func(c *natsjs.StreamConfig) { c.Subjects = []string{"elsewhere.>"} }, kind: "stream", field: "subjects"},
		{name: "short duplicate window", editStream: func(c *natsjs.StreamConfig) { c.Duplicates = 10 * time.Second }, kind: "stream", field: "duplicate_window"},
		{name: "small messages", editStream: func(c *natsjs.StreamConfig) { c.MaxMsgSize = 4096 }, kind: "stream", field: "max_msg_size"},
		{name: "no rollups", editStream: func(c *natsjs.StreamConfig) { c.AllowRollup = false }, kind: "stream", field: "allow_rollup_hdrs"},
		{name: "deny purge", editStream: func(c *natsjs.StreamConfig) { c.AllowRollup, c.DenyPurge = false, true }, kind: "stream", field: "allow_rollup_hdrs"},
		{name: "no direct gets", editStream: func(c *natsjs.StreamConfig) { c.AllowDirect = false }, kind: "stream", field: "allow_direct"},
		{name: "lease history", editKV: func(c *natsjs.KeyValueConfig) { c.History = 5 }, kind: "lease bucket", field: "history"},
		{name: "leases that never expire", editKV: func(c *natsjs.KeyValueConfig) { c.TTL = 0 }, kind: "lease bucket", field: "ttl"},
		{name: "leases in memory", editKV: func(c *natsjs.KeyValueConfig) { c.Storage = natsjs.MemoryStorage }, kind: "lease bucket", field: "storage"},
		{name: "no per-key TTLs", editKV: func(c *natsjs.KeyValueConfig) { c.LimitMarkerTTL = 0 }, kind: "lease bucket", field: "allow_msg_ttl"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := freshOptions()
			wantS, wantK := provision(t, js, o, c.editStream, c.editKV)
			if c.opts != nil {
				c.opts(o)
			}
			_, err := Open(ctx, connect(t, srvURL), o)
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrConfigMismatch) {
				t.Fatalf("Open: %v, want a *ConfigError", err)
			}
			t.Logf("reported: %v", err)
			if ce.Kind != c.kind || !slices.ContainsFunc(ce.Mismatches, func(m Mismatch) bool { return m.Field == c.field }) {
				t.Errorf("the error does not name the %s's %s", c.kind, c.field)
			}
			gotS, gotK := configs(t, js, o)
			if !reflect.DeepEqual(gotS, wantS) || !reflect.DeepEqual(gotK, wantK) {
				t.Errorf("Open changed the stream or the bucket")
			}
		})
	}
}

func TestCovers(t *testing.T) {
	for _, c := range []struct {
		filter, subj string
		want         bool
	}{
		{"seglog.s.*", "seglog.s.*", true},
		{"seglog.>", "seglog.s.*", true},
		{"seglog.*.*", "seglog.s.*", true},
		{">", "seglog.s.*", true},
		{"seglog.s.abc", "seglog.s.*", false},
		{"seglog.s", "seglog.s.*", false},
		{"seglog.s.*.*", "seglog.s.*", false},
		{"seglog.s.>", "seglog.s.*", true},
		{"other.s.*", "seglog.s.*", false},
		{"seglog.s.*", "seglog.>", false},
	} {
		if got := covers(c.filter, c.subj); got != c.want {
			t.Errorf("covers(%q, %q) = %v, want %v", c.filter, c.subj, got, c.want)
		}
	}
}
