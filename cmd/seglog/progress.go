package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows how far a long command has come, on stderr. On a
// terminal it draws a bar (schollz/progressbar) per task, cleared when the
// task ends; anywhere else (a pipe, a file, a test's buffer) it draws
// nothing: a task that says so prints one plain line when it ends, and no
// other task prints anything. Nothing it writes off a terminal holds a
// control character.
type progress struct {
	w   io.Writer
	tty bool

	mu  sync.Mutex
	bar *progressbar.ProgressBar // the task drawn now, if any
}

// newProgress reports on w, with bars if w is a terminal (and TERM is
// not "dumb").
func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb" {
		p.tty = true
	}
	return p
}

// task is one step of a command.
type task struct {
	p     *progress
	name  string
	unit  string
	plain bool // print "name: done in 1.2s" when it ends, off a terminal too
	start time.Time
	total int
	done  int
	ended bool
	timer *time.Timer              // draws the bar, once the task has run drawDelay
	bar   *progressbar.ProgressBar // a bar of known length, started (its clock) with the task
}

// drawDelay is how long a task runs before its bar is drawn: a short
// task draws none, and what the command printed before it (on stdout,
// through a pipe maybe) is out first.
const drawDelay = 300 * time.Millisecond

// start begins a task of total units (0 or less: unknown, a spinner with
// the time), named name on its bar. With plain, its end is a line of its
// own, on a terminal and off one.
func (p *progress) start(name string, total int, unit string, plain bool) *task {
	if p == nil {
		return &task{}
	}
	t := &task{p: p, name: name, unit: unit, plain: plain, start: time.Now(), total: total}
	if !p.tty {
		return t
	}
	if total > 0 {
		// Made now, so that its rate counts from the task's start;
		// drawn from drawDelay on.
		t.bar = t.newBar()
		t.bar.StartWithoutRender()
	}
	t.timer = time.AfterFunc(drawDelay, t.draw)
	return t
}

// newBar is the task's bar: of its length if known, else a spinner (whose
// own goroutine redraws it, once it is drawn).
func (t *task) newBar() *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(t.p.w),
		progressbar.OptionSetDescription(t.name),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
	}
	max := int64(-1) // a spinner with the time
	if t.total > 0 {
		max = int64(t.total)
		opts = append(opts, progressbar.OptionShowCount(), progressbar.OptionSetItsString(t.unit), progressbar.OptionShowIts())
	}
	return progressbar.NewOptions64(max, opts...)
}

// draw draws the task's bar, at what is done so far.
func (t *task) draw() {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if t.ended {
		return
	}
	if t.bar == nil {
		t.p.bar = t.newBar()
		t.p.bar.RenderBlank()
		return
	}
	t.p.bar = t.bar
	t.bar.Set(t.done)
}

// set shows that done units are done.
func (t *task) set(done int) {
	if t.p == nil {
		return
	}
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if t.total > 0 {
		done = min(done, t.total)
	}
	t.done = done
	if t.p.bar != nil && !t.ended && t.total > 0 {
		t.p.bar.Set(done)
	}
}

// end ends the task: its bar is cleared, and a plain task prints its line
// ("name: done in 1.2s", or with failed, "name: failed after 1.2s").
// Only its first call does anything.
func (t *task) end(failed bool) {
	if t.p == nil {
		return
	}
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if t.ended {
		return
	}
	t.ended = true
	if t.timer != nil {
		t.timer.Stop()
	}
	if b := t.p.bar; b != nil {
		b.Finish()
		b.Clear()
		t.p.bar = nil
	}
	if t.plain {
		verb := "done in"
		if failed {
			verb = "failed after"
		}
		fmt.Fprintf(t.p.w, "%s: %s %.2fs\n", t.name, verb, time.Since(t.start).Seconds())
	}
}

// guard returns w as a writer that clears the bar before each write and
// draws it again after one that ends a line, for a command that prints
// on stdout while a bar is drawn on the same terminal.
func (p *progress) guard(w io.Writer) io.Writer {
	if p == nil || !p.tty {
		return w
	}
	return guarded{p, w}
}

type guarded struct {
	p *progress
	w io.Writer
}

func (g guarded) Write(b []byte) (int, error) {
	g.p.mu.Lock()
	defer g.p.mu.Unlock()
	bar := g.p.bar
	if bar == nil {
		return g.w.Write(b)
	}
	bar.Clear()
	n, err := g.w.Write(b)
	if bytes.HasSuffix(b, []byte("\n")) {
		io.WriteString(g.p.w, bar.String())
	}
	return n, err
}
