package jetstream

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"weak"

	"github.com/nats-io/nats.go"
)

// ErrPermission is the kind of every *PermissionError. Test with
// errors.Is.
var ErrPermission = errors.New("jetstream: a permission the store needs is missing")

// PermissionError is a request the server refused because the host's
// NATS user may not publish to its subject: the store would otherwise
// only see no answer, a timeout. backend/jetstream/DESIGN.md, Provisioning, lists the
// permissions a host needs.
type PermissionError struct {
	Subject    string // the subject the host may not publish to
	Permission string // what it is for: "STREAM.INFO on stream SEGLOG", "DIRECT.GET on the lease bucket SEGLOG_LEASES", ...
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("jetstream: the server refused a request for lack of a permission: %s (publish to %q); backend/jetstream/DESIGN.md, Provisioning, lists what a host needs", e.Permission, e.Subject)
}

// Is reports whether target is ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// permissionOf names what a publish to subj is for.
func (st *Store) permissionOf(subj string) string {
	if api, ok := strings.CutPrefix(subj, "$JS.API."); ok {
		for _, op := range []string{"STREAM.INFO", "STREAM.CREATE", "STREAM.MSG.GET", "STREAM.PURGE", "DIRECT.GET", "CONSUMER.CREATE", "CONSUMER.DELETE", "CONSUMER.MSG.NEXT"} {
			rest, ok := strings.CutPrefix(api, op+".")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(rest, ".")
			if bucket, ok := strings.CutPrefix(name, "KV_"); ok && bucket == st.opts.LeaseBucket {
				return fmt.Sprintf("%s on the lease bucket %s (stream %s)", op, bucket, name)
			}
			return fmt.Sprintf("%s on stream %s", op, name)
		}
		return "the JetStream API " + api
	}
	if strings.HasPrefix(subj, "$KV."+st.opts.LeaseBucket+".") {
		return fmt.Sprintf("writing the keys of the lease bucket %s", st.opts.LeaseBucket)
	}
	if strings.HasPrefix(subj, st.opts.Prefix+".s.") {
		return fmt.Sprintf("publishing to the session subjects %s.s.* of stream %s", st.opts.Prefix, st.opts.Stream)
	}
	return "publishing to " + subj
}

// A permission violation of the server names the subject refused.
var violationRe = regexp.MustCompile(`Permissions Violation for Publish to "([^"]+)"`)

// violated returns the subject a permission violation error names.
func violated(err error) (string, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return "", false
	}
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

// permHub learns of the permission violations the server reports on one
// connection (they come as asynchronous errors: the request itself gets
// no answer) and ends the requests waiting on the subject refused. One per
// connection, shared by the stores on it: it chains the connection's
// error handler (which it calls after, as before). A handler the caller
// sets later replaces it: requests then time out, and are reported as
// refused if the connection's last error names their subject.
type permHub struct {
	mu      sync.Mutex
	pending map[*permWait]struct{}
}

type permWait struct {
	subjects []string // exact, or a prefix ending in "."
	cancel   context.CancelCauseFunc
	hit      string // the subject refused, once
}

var hubs struct {
	mu sync.Mutex
	m  map[weak.Pointer[nats.Conn]]*permHub
}

// hubOf returns nc's hub, made at its first store.
func hubOf(nc *nats.Conn) *permHub {
	hubs.mu.Lock()
	defer hubs.mu.Unlock()
	k := weak.Make(nc)
	if h := hubs.m[k]; h != nil {
		return h
	}
	if hubs.m == nil {
		hubs.m = map[weak.Pointer[nats.Conn]]*permHub{}
	}
	for old := range hubs.m {
		if old.Value() == nil {
			delete(hubs.m, old) // (a connection collected)
		}
	}
	h := &permHub{pending: map[*permWait]struct{}{}}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, sub *nats.Subscription, err error) {
		h.violation(err)
		if prev != nil {
			prev(c, sub, err)
		}
	})
	hubs.m[k] = h
	return h
}

// violation ends the requests waiting on the subject err names.
func (h *permHub) violation(err error) {
	subj, ok := violated(err)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.pending {
		if w.matches(subj) && w.hit == "" {
			w.hit = subj
			w.cancel(errRefused{subj})
		}
	}
}

func (w *permWait) matches(subj string) bool {
	for _, s := range w.subjects {
		if subj == s || strings.HasSuffix(s, ".") && strings.HasPrefix(subj, s) {
			return true
		}
	}
	return false
}

// errRefused is the cause of a request's context ended by a violation.
type errRefused struct{ subj string }

func (e errRefused) Error() string { return "permissions violation for publish to " + e.subj }

type permKey struct{}

// watchPerms returns ctx ended early if the server refuses a publish to
// one of subjects (exact, or any under a subject ending in ".") for lack
// of permission; refused maps the request's error then.
func (h *permHub) watchPerms(ctx context.Context, subjects ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	w := &permWait{subjects: subjects, cancel: cancel}
	h.mu.Lock()
	h.pending[w] = struct{}{}
	h.mu.Unlock()
	return context.WithValue(ctx, permKey{}, w), func() {
		h.mu.Lock()
		delete(h.pending, w)
		h.mu.Unlock()
		cancel(nil)
	}
}

// req bounds a request by Options.Timeout (rctx) and watches subjects
// for permission violations (watchPerms).
func (st *Store) req(ctx context.Context, subjects ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := st.rctx(ctx)
	ctx, unwatch := st.perms.watchPerms(ctx, subjects...)
	return ctx, func() { unwatch(); cancel() }
}

// refused returns err, or the *PermissionError of a request made under
// ctx (from watchPerms) that the server refused: the violation ended it,
// or it ended without an answer and the connection's last error is a
// violation on its subject.
func (st *Store) refused(ctx context.Context, err error) error {
	return refusedOn(st.nc, ctx, err, st.permissionOf)
}

func refusedOn(nc *nats.Conn, ctx context.Context, err error, name func(string) string) error {
	if err == nil || errors.Is(err, ErrPermission) {
		return err
	}
	if r, ok := context.Cause(ctx).(errRefused); ok {
		return &PermissionError{Subject: r.subj, Permission: name(r.subj)}
	}
	w, _ := ctx.Value(permKey{}).(*permWait)
	if w == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		return err
	}
	if subj, ok := violated(nc.LastError()); ok && w.matches(subj) {
		return &PermissionError{Subject: subj, Permission: name(subj)}
	}
	return err
}
