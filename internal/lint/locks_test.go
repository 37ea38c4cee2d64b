package lint

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The lock checks: no function takes a mutex it already holds (Go's
// mutexes are not re-entrant: the goroutine waits for itself forever),
// and no two mutexes are taken in both orders. See doc.go for what the
// analysis sees and what it does not.

// newLockAnalysis analyses the packages (type-checked, of one module):
// every function and method they declare, and the function literals in
// them.
func newLockAnalysis(fset *token.FileSet, root string, pkgs []*srcPkg) *lockAnalysis {
	a := &lockAnalysis{fset: fset, root: root, funcs: map[string]*funcInfo{}, okLines: map[string]map[int]okNote{}, used: map[string]map[int]bool{},
		analysed: map[string]bool{}, impls: map[string][]*funcInfo{}, fieldImpls: map[*types.Var][]*funcInfo{}}
	for _, p := range pkgs {
		a.analysed[p.path] = true
		for _, name := range p.types.Scope().Names() {
			if tn, ok := p.types.Scope().Lookup(name).(*types.TypeName); ok && !tn.IsAlias() {
				if n, ok := tn.Type().(*types.Named); ok && !types.IsInterface(n) && n.TypeParams() == nil {
					a.named = append(a.named, n)
				}
			}
		}
	}
	type decl struct {
		fn *funcInfo
		fd *ast.FuncDecl
	}
	var decls []decl
	for _, p := range pkgs {
		for _, f := range p.files {
			a.annotations(f)
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				obj, ok := p.info.Defs[fd.Name].(*types.Func)
				if !ok {
					continue
				}
				fn := &funcInfo{name: obj.FullName(), pkg: p, decl: fd}
				fn.pre = a.preOf(p, fd)
				a.funcs[fn.name] = fn
				a.order = append(a.order, fn)
				decls = append(decls, decl{fn, fd})
			}
		}
	}
	for _, p := range pkgs {
		for _, f := range p.files {
			a.funcFields(p, f)
		}
	}
	// Walk every function; again while what a function returns holding
	// changed (a helper that locks for its caller: lockOpen).
	for pass := 0; pass < 6; pass++ {
		sig := func(fn *funcInfo) string {
			out := fmt.Sprint(sortedKeys(fn.exit))
			for i := range 16 {
				if st, ok := fn.paramHeld[i]; ok {
					out += fmt.Sprint(i, sortedKeys(st))
				}
			}
			return out
		}
		before := map[*funcInfo]string{}
		for _, fn := range a.order {
			before[fn] = sig(fn)
		}
		for _, d := range decls {
			entry := d.fn.pre.clone()
			if entry == nil {
				entry = lockState{} // reachable, nothing held
			}
			a.analyseFunc(d.fn, d.fd.Body, entry)
		}
		for i := 0; i < len(a.order); i++ { // (grows as literals are found)
			if fn := a.order[i]; fn.lit != nil {
				a.analyseFunc(fn, fn.lit.Body, lockState{})
			}
		}
		same := pass > 0 // (the first pass saw no callee's results)
		for _, fn := range a.order {
			if before[fn] != sig(fn) {
				same = false
			}
		}
		if same {
			break
		}
	}
	a.summarise()
	return a
}

// annotations records the //lint:lockok comments of f.
func (a *lockAnalysis) annotations(f *ast.File) {
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			text, ok := strings.CutPrefix(c.Text, "//lint:lockok")
			if !ok {
				continue
			}
			pos := a.fset.Position(c.Pos())
			file := a.where(c.Pos())
			file = file[:strings.LastIndex(file, ":")]
			reason := strings.TrimSpace(text)
			if reason == "" {
				a.problems = append(a.problems, fmt.Sprintf("%s:%d: //lint:lockok without a reason", file, pos.Line))
				continue
			}
			line := pos.Line
			if a.ownLine(c) {
				line++ // on a line of its own: it covers the next
			}
			if a.okLines[file] == nil {
				a.okLines[file] = map[int]okNote{}
			}
			a.okLines[file][line] = okNote{reason, pos.Line}
		}
	}
}

// ownLine reports whether comment c is alone on its line.
func (a *lockAnalysis) ownLine(c *ast.Comment) bool {
	pos := a.fset.Position(c.Pos())
	src, err := os.ReadFile(pos.Filename)
	if err != nil || pos.Offset > len(src) {
		return false
	}
	lineStart := bytes.LastIndexByte(src[:pos.Offset], '\n') + 1
	return len(bytes.TrimSpace(src[lineStart:pos.Offset])) == 0
}

// excused reports whether a //lint:lockok covers the line of p, and
// marks it used.
func (a *lockAnalysis) excused(p token.Pos) bool {
	w := a.where(p)
	i := strings.LastIndex(w, ":")
	file := w[:i]
	line, _ := strconv.Atoi(w[i+1:])
	if _, ok := a.okLines[file][line]; !ok {
		return false
	}
	if a.used[file] == nil {
		a.used[file] = map[int]bool{}
	}
	a.used[file][line] = true
	return true
}

// summarise computes what each function may take: its own Locks of
// mutexes its callers do not hold by its doc, and what the functions it
// calls take, but for those (to a fixpoint over the call graph).
func (a *lockAnalysis) summarise() {
	for _, fn := range a.order {
		fn.takes = map[lockKey]*takeStep{}
		for _, l := range fn.locks {
			if _, pre := fn.pre[l.key]; !l.try && !pre && fn.takes[l.key] == nil {
				fn.takes[l.key] = &takeStep{lock: l}
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for _, fn := range a.order {
			for _, c := range fn.calls {
				if c.ok {
					continue
				}
				g := a.funcs[c.callee]
				for _, k := range sortedKeys(g.takes) {
					if _, pre := fn.pre[k]; pre || fn.takes[k] != nil {
						continue
					}
					fn.takes[k] = &takeStep{call: c, callee: g}
					changed = true
				}
			}
		}
	}
}

func sortedKeys[V any](m map[lockKey]V) []lockKey {
	ks := make([]lockKey, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// chain says how fn takes k: the calls down to the Lock.
func (a *lockAnalysis) chain(fn *funcInfo, k lockKey) string {
	var b strings.Builder
	seen := map[*funcInfo]bool{}
	for cur := fn; cur != nil && !seen[cur]; {
		seen[cur] = true
		st := cur.takes[k]
		if st == nil {
			break
		}
		if st.lock != nil {
			fmt.Fprintf(&b, "%s %ss it at %s", shortFunc(cur.name), st.lock.how, a.where(st.lock.pos))
			break
		}
		fmt.Fprintf(&b, "%s calls %s%s at %s; ", shortFunc(cur.name), shortFunc(st.callee.name), through(st.call), a.where(st.call.pos))
		cur = st.callee
	}
	return b.String()
}

// through says which interface a call goes through, if one.
func through(c *callSite) string {
	if c.via == "" {
		return ""
	}
	return " (through " + c.via + ")"
}

// heldAt says where a mutex held was taken.
func (a *lockAnalysis) heldAt(h held) string {
	return h.how + " at " + a.where(h.pos)
}

// reentries returns a message per place that takes a mutex it may
// already hold: a Lock of it, or a call of a function that takes it.
func (a *lockAnalysis) reentries() []string {
	var out []string
	// A literal walked in place at two calls of its variable, or also on
	// its own, is reported once per place and mutex.
	type at struct {
		pos token.Pos
		key lockKey
	}
	seen := map[at]bool{}
	once := func(p token.Pos, k lockKey) bool {
		if seen[at{p, k}] {
			return false
		}
		seen[at{p, k}] = true
		return true
	}
	for _, fn := range a.order {
		for _, l := range fn.locks {
			h, ok := l.state[l.key]
			if !ok || l.try || l.ok || !once(l.pos, l.key) {
				continue
			}
			out = append(out, fmt.Sprintf("%s: %s: %s of %s, which it already holds (%s): a self-deadlock", a.where(l.pos), shortFunc(fn.name), l.how, l.key, a.heldAt(h)))
		}
		for _, c := range fn.calls {
			if c.ok {
				continue
			}
			g := a.funcs[c.callee]
			for _, k := range sortedKeys(g.takes) {
				h, ok := c.state[k]
				if !ok || !once(c.pos, k) {
					continue
				}
				out = append(out, fmt.Sprintf("%s: %s calls %s%s holding %s (%s), and it takes %s again: %s: a self-deadlock", a.where(c.pos), shortFunc(fn.name), shortFunc(g.name), through(c), k, a.heldAt(h), k, a.chain(g, k)))
			}
		}
	}
	return out
}

// orderEdge is evidence that mutex to is taken while from is held.
type orderEdge struct {
	from, to lockKey
	what     string
}

// lockOrder returns the pairs of mutexes taken one while the other is
// held, with the first evidence of each pair found.
func (a *lockAnalysis) lockOrder() map[[2]lockKey]orderEdge {
	edges := map[[2]lockKey]orderEdge{}
	add := func(from, to lockKey, what func() string) {
		if from == to {
			return
		}
		k := [2]lockKey{from, to}
		if _, ok := edges[k]; ok {
			return
		}
		edges[k] = orderEdge{from, to, what()}
	}
	for _, fn := range a.order {
		for _, l := range fn.locks {
			if l.try || l.ok {
				continue // TryLock never waits
			}
			for _, k := range sortedKeys(l.state) {
				h := l.state[k]
				add(k, l.key, func() string {
					return fmt.Sprintf("%s: %s %ss %s holding %s (%s)", a.where(l.pos), shortFunc(fn.name), l.how, l.key, k, a.heldAt(h))
				})
			}
		}
		for _, c := range fn.calls {
			if c.ok {
				continue
			}
			g := a.funcs[c.callee]
			for _, k := range sortedKeys(c.state) {
				if _, pre := g.pre[k]; pre {
					continue // held on: g's own Locks and calls say what it takes under it
				}
				h := c.state[k]
				for _, t := range sortedKeys(g.takes) {
					add(k, t, func() string {
						return fmt.Sprintf("%s: %s calls %s%s holding %s (%s), and it takes %s: %s", a.where(c.pos), shortFunc(fn.name), shortFunc(g.name), through(c), k, a.heldAt(h), t, a.chain(g, t))
					})
				}
			}
		}
	}
	return edges
}

// orderCycles returns a message per cycle of the lock order: mutexes
// taken in an order in one place and in another order elsewhere.
func orderCycles(edges map[[2]lockKey]orderEdge) []string {
	succ := map[lockKey][]lockKey{}
	for k := range edges {
		succ[k[0]] = append(succ[k[0]], k[1])
	}
	var nodes []lockKey
	for k := range succ {
		slices.Sort(succ[k])
		nodes = append(nodes, k)
	}
	slices.Sort(nodes)
	// The strongly connected components (Tarjan's).
	index, low := map[lockKey]int{}, map[lockKey]int{}
	on := map[lockKey]bool{}
	var stack []lockKey
	var sccs [][]lockKey
	var strong func(v lockKey)
	strong = func(v lockKey) {
		index[v], low[v] = len(index), len(index)
		stack = append(stack, v)
		on[v] = true
		for _, w := range succ[v] {
			if _, ok := index[w]; !ok {
				strong(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var c []lockKey
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			if len(c) > 1 {
				sccs = append(sccs, c)
			}
		}
	}
	for _, v := range nodes {
		if _, ok := index[v]; !ok {
			strong(v)
		}
	}
	var out []string
	for _, c := range sccs {
		slices.Sort(c)
		in := map[lockKey]bool{}
		for _, v := range c {
			in[v] = true
		}
		// A shortest cycle through the first: breadth first back to it.
		start := c[0]
		prev := map[lockKey]lockKey{}
		queue := []lockKey{start}
		var last lockKey
		found := false
		for len(queue) > 0 && !found {
			v := queue[0]
			queue = queue[1:]
			for _, w := range succ[v] {
				if !in[w] {
					continue
				}
				if w == start {
					last, found = v, true
					break
				}
				if _, ok := prev[w]; !ok {
					prev[w] = v
					queue = append(queue, w)
				}
			}
		}
		path := []lockKey{start}
		for v := last; v != start; v = prev[v] {
			path = append(path, v)
		}
		slices.Reverse(path[1:])
		path = append(path, start)
		var b strings.Builder
		fmt.Fprintf(&b, "lock order cycle %s:", joinKeys(path))
		for i := 0; i+1 < len(path); i++ {
			fmt.Fprintf(&b, "\n\t%s", edges[[2]lockKey{path[i], path[i+1]}].what)
		}
		out = append(out, b.String())
	}
	sort.Strings(out)
	return out
}

func joinKeys(ks []lockKey) string {
	var ss []string
	for _, k := range ks {
		ss = append(ss, string(k))
	}
	return strings.Join(ss, " -> ")
}

// unusedAnnotations returns a message per //lint:lockok that excused
// nothing (the code it excused changed).
func (a *lockAnalysis) unusedAnnotations() []string {
	var out []string
	for file, lines := range a.okLines {
		for line, note := range lines {
			if !a.used[file][line] {
				out = append(out, fmt.Sprintf("%s:%d: //lint:lockok %s: excuses nothing (remove it)", file, note.line, note.reason))
			}
		}
	}
	sort.Strings(out)
	return out
}

var (
	moduleLocksOnce sync.Once
	moduleLocks     *lockAnalysis
	moduleLocksErr  error
)

// analyseModule analyses the core module's packages (once per test
// binary: the checks share it).
func analyseModule(t *testing.T) *lockAnalysis {
	t.Helper()
	moduleLocksOnce.Do(func() {
		touchSources(t)
		fset, pkgs, err := loadPackages("../..", mod, "./...")
		if err != nil {
			moduleLocksErr = err
			return
		}
		root, _ := filepath.Abs("../..")
		moduleLocks = newLockAnalysis(fset, root, pkgs)
		// Both checks mark the annotations they use: run both now.
		moduleLocks.reentryMsgs = moduleLocks.reentries()
		moduleLocks.orderMsgs = orderCycles(moduleLocks.lockOrder())
	})
	if moduleLocksErr != nil {
		t.Fatal(moduleLocksErr)
	}
	return moduleLocks
}

// TestLockReentry: no function of the core module takes a mutex it
// already holds, itself or through the functions it calls. Issue 35:
// compaction's keptLive held db.mu and called poisonWith, which takes
// db.mu: the store hung.
func TestLockReentry(t *testing.T) {
	a := analyseModule(t)
	for _, p := range a.problems {
		t.Error(p)
	}
	for _, m := range a.reentryMsgs {
		t.Error(m)
	}
	for _, m := range a.unusedAnnotations() {
		t.Error(m)
	}
}

// TestLockOrder: no two mutexes of the core module are taken in both
// orders (a cycle of the lock order: two goroutines, each holding one,
// wait for each other).
func TestLockOrder(t *testing.T) {
	a := analyseModule(t)
	for _, m := range a.orderMsgs {
		t.Error(m)
	}
	if len(a.orderMsgs) == 0 {
		// An order the code keeps, as one list (go test -v).
		t.Log("lock order: " + joinKeys(orderList(a.lockOrder())))
	}
}

// orderList puts the mutexes taken under another, or with another
// under them, in an order every edge keeps (a topological sort; ties by
// name). There is one when orderCycles finds no cycle.
func orderList(edges map[[2]lockKey]orderEdge) []lockKey {
	in := map[lockKey]int{}
	succ := map[lockKey][]lockKey{}
	nodes := map[lockKey]bool{}
	for k := range edges {
		succ[k[0]] = append(succ[k[0]], k[1])
		in[k[1]]++
		nodes[k[0]], nodes[k[1]] = true, true
	}
	var ready, order []lockKey
	for n := range nodes {
		if in[n] == 0 {
			ready = append(ready, n)
		}
	}
	for len(ready) > 0 {
		slices.Sort(ready)
		n := ready[0]
		ready = ready[1:]
		order = append(order, n)
		for _, m := range succ[n] {
			if in[m]--; in[m] == 0 {
				ready = append(ready, m)
			}
		}
	}
	return order
}

// TestLockChecksFixture runs the checks on testdata/lockcheck, whose
// comments say what each must report: the patterns the engine uses (a
// defer, an early exit, a helper that returns holding the lock, a
// callback run under the callee's lock, a doc's "Called with db.mu held")
// and the ways to get them wrong.
func TestLockChecksFixture(t *testing.T) {
	fset, pkgs, err := loadPackages(".", mod, "./testdata/lockcheck")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("testdata/lockcheck")
	a := newLockAnalysis(fset, root, pkgs)
	norm := func(s string) string { return strings.ReplaceAll(s, "internal/lint/testdata/lockcheck", "lockcheck") }

	src, err := os.ReadFile("testdata/lockcheck/lockcheck.go")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for i, line := range strings.Split(string(src), "\n") {
		if _, w, ok := strings.Cut(line, "// want: "); ok {
			want[i+1] = w
		}
	}
	line := func(msg string) int {
		rest, ok := strings.CutPrefix(msg, "lockcheck.go:")
		if !ok {
			return 0
		}
		n, _ := strconv.Atoi(rest[:strings.Index(rest, ":")])
		return n
	}
	got := map[int]bool{}
	for _, m := range a.reentries() {
		m = norm(m)
		n := line(m)
		got[n] = true
		w, ok := want[n]
		switch {
		case n == noReasonLine(src):
			// the annotation without a reason excuses nothing
		case !ok:
			t.Errorf("reported, not wanted: %s", m)
		case !strings.Contains(m, w):
			t.Errorf("reported as\n\t%s\nwant a message with %q", m, w)
		}
	}
	for n, w := range want {
		if !got[n] {
			t.Errorf("lockcheck.go:%d: not reported (want %q)", n, w)
		}
	}
	if n := noReasonLine(src); !got[n] {
		t.Errorf("lockcheck.go:%d: the call under an annotation without a reason: not reported", n)
	}

	cycles := orderCycles(a.lockOrder())
	if len(cycles) != 1 || !strings.Contains(norm(cycles[0]), "lock order cycle lockcheck.DB.idxMu -> lockcheck.DB.layoutMu -> lockcheck.DB.idxMu") {
		t.Errorf("lock order cycles: %q, want one of idxMu and layoutMu (orderAB, orderBA)", cycles)
	}
	staleLine := 1 + strings.Count(string(src[:strings.Index(string(src), "//lint:lockok nothing")]), "\n")
	w := fmt.Sprintf("lockcheck.go:%d: //lint:lockok nothing here takes a lock: excuses nothing (remove it)", staleLine)
	if un := a.unusedAnnotations(); len(un) != 1 || un[0] != w {
		t.Errorf("unused annotations: %q, want %q", un, w)
	}
	if len(a.problems) != 1 || !strings.Contains(a.problems[0], "//lint:lockok without a reason") {
		t.Errorf("problems: %q, want the annotation without a reason", a.problems)
	}
}

// noReasonLine is the line of the fixture's annotation without a reason.
func noReasonLine(src []byte) int {
	for i, line := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(line, "//lint:lockok") {
			return i + 1
		}
	}
	return -1
}

// TestEngineLockOrder: the engine's lock order, as engine/doc.go lists it
// (outermost first, one lock a line, indented, after the line that starts
// "Lock order"), is what the code keeps: every pair of the engine's
// mutexes (and store.Front.mu, a handle's lock) taken one under the other
// is in the list's order, every engine mutex taken with another is
// listed, and every listed one is still taken with another (the list
// names no lock that is gone).
func TestEngineLockOrder(t *testing.T) {
	doc, err := os.ReadFile("../../engine/doc.go")
	if err != nil {
		t.Fatal(err)
	}
	var listed []lockKey
	rank := map[lockKey]int{}
	in := false
	for line := range strings.Lines(string(doc)) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "// Lock order"):
			in = true
		case in && strings.HasPrefix(line, "//\t"):
			name := strings.Fields(strings.TrimPrefix(line, "//\t"))[0]
			switch {
			case strings.HasPrefix(name, "wal."), strings.HasPrefix(name, "coord."), strings.HasPrefix(name, "dict."):
				name = "engine/internal/" + name // the log's (package engine/internal/wal), the coordination's (engine/internal/coord), the dictionary's (engine/internal/dict)
			case strings.Count(name, ".") == 1:
				name = "engine." + name // a lock of package engine
			}
			rank[lockKey(name)] = len(listed)
			listed = append(listed, lockKey(name))
		case in && len(listed) > 0 && line == "//":
			in = false
		}
	}
	if len(listed) == 0 {
		t.Fatal(`engine/doc.go lists no lock order (indented lines after "// Lock order")`)
	}
	ours := func(k lockKey) bool {
		s := string(k)
		return strings.HasPrefix(s, "engine.") || strings.HasPrefix(s, "engine/internal/") || s == "store.Front.mu"
	}
	seen := map[lockKey]bool{}
	edges := analyseModule(t).lockOrder()
	keys := make([][2]lockKey, 0, len(edges))
	for k := range edges {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+" "+keys[i][1] < keys[j][0]+" "+keys[j][1] })
	for _, k := range keys {
		from, to := k[0], k[1]
		if !ours(from) || !ours(to) {
			continue
		}
		seen[from], seen[to] = true, true
		rf, okf := rank[from]
		rt, okt := rank[to]
		switch {
		case !okf || !okt:
			// reported below, once per lock
		case rf > rt:
			t.Errorf("%s is taken holding %s (%s), but engine/doc.go's lock order puts %s first", to, from, edges[k].what, to)
		}
	}
	for k := range seen {
		if _, ok := rank[k]; !ok {
			t.Errorf("%s is taken with other engine locks but engine/doc.go's lock order does not list it", k)
		}
	}
	for _, k := range listed {
		if !seen[k] {
			t.Errorf("engine/doc.go's lock order lists %s, which no code takes with another engine lock (renamed or gone?)", k)
		}
	}
}
