package jetstream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// A host whose NATS user lacks a permission the store needs gets a
// *PermissionError naming it, as soon as the server refuses the request
// (it used to wait for the request's timeout and report a deadline
// exceeded): without STREAM.INFO, Open; without STREAM.MSG.GET, Stat,
// Create, List, a read open; without the lease bucket's direct get,
// Delete.
func TestPermissions(t *testing.T) {
	o := freshOptions()
	deny := func(subjects ...string) *server.Permissions {
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: subjects},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}
	}
	srv, err := embedded.StartWith(t.TempDir(), func(so *server.Options) {
		so.Users = []*server.User{
			{Username: "admin", Password: "a"},
			{Username: "noinfo", Password: "p", Permissions: deny("$JS.API.STREAM.INFO." + o.Stream)},
			{Username: "noget", Password: "p", Permissions: deny("$JS.API.STREAM.MSG.GET." + o.Stream)},
			{Username: "nokvget", Password: "p", Permissions: deny("$JS.API.DIRECT.GET.KV_" + o.LeaseBucket + ".>")},
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() }) // (after the stores' Close)
	ctx := context.Background()
	as := func(user string) *nats.Conn {
		password := "p"
		if user == "admin" {
			password = "a"
		}
		// (quiet: nats.go's default handler prints every violation)
		nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, password), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	admin, err := Open(ctx, as("admin"), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	w, err := admin.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// The hosts' requests would time out after 20 s; the refusal comes
	// at once.
	oh := *o
	oh.Create, oh.Timeout = false, 20*time.Second
	want := func(what string, err error, permission string) {
		t.Helper()
		var pe *PermissionError
		if !errors.As(err, &pe) || !errors.Is(err, ErrPermission) || !strings.Contains(pe.Permission, permission) {
			t.Fatalf("%s: %v, want a *PermissionError naming %s", what, err, permission)
		}
		t.Logf("%s: %v", what, err)
	}
	open := func(user string) *Store {
		t.Helper()
		ou := oh
		ou.Host = user
		st, err := Open(ctx, as(user), &ou)
		if err != nil {
			t.Fatalf("open as %s: %v", user, err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	// Deadlines longer than Timeout: the refusal ends the request, not
	// the caller's deadline.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	ou := oh
	ou.Host = "noinfo"
	_, err = Open(ctx, as("noinfo"), &ou)
	want("Open without STREAM.INFO", err, "STREAM.INFO on stream "+o.Stream)

	noget := open("noget")
	_, err = noget.Stat(ctx, "s")
	want("Stat without STREAM.MSG.GET", err, "STREAM.MSG.GET on stream "+o.Stream)
	_, err = noget.Create(ctx, enginetest.Meta("t"))
	want("Create without STREAM.MSG.GET", err, "STREAM.MSG.GET")
	_, err = noget.List(ctx)
	want("List without STREAM.MSG.GET", err, "STREAM.MSG.GET")
	_, err = noget.Open(ctx, "s", store.Read)
	want("read open without STREAM.MSG.GET", err, "STREAM.MSG.GET")

	nokv := open("nokvget")
	err = nokv.Delete(ctx, "s")
	want("Delete without the lease bucket's direct get", err, "DIRECT.GET on the lease bucket "+o.LeaseBucket)
	if _, err := admin.Stat(ctx, "s"); err != nil {
		t.Fatalf("the refused Delete deleted: %v", err)
	}

}
