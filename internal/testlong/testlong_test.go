package testlong

import (
	"testing"
)

func TestPick(t *testing.T) {
	def := 2
	if testing.Short() {
		def = 1
	}
	for _, c := range []struct {
		env  string
		want int
	}{{"", def}, {"0", def}, {"1", 3}} {
		t.Setenv(Env, c.env)
		if got := Pick(1, 2, 3); got != c.want {
			t.Errorf("%s=%q: Pick(1, 2, 3) = %d, want %d", Env, c.env, got, c.want)
		}
		if got := On(); got != (c.want == 3) {
			t.Errorf("%s=%q: On() = %v", Env, c.env, got)
		}
	}
	t.Setenv(Env, "yes")
	defer func() {
		if recover() == nil {
			t.Errorf("%s=yes did not panic", Env)
		}
	}()
	On()
}
