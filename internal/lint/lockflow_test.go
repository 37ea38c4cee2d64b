package lint

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The analysis of the lock checks (locks_test.go). Per function it walks
// the statements in their order of execution with the set of mutexes held
// (a may-analysis: a branch's locks join at the merge, loops go round to
// a fixpoint), and records each Lock and each static call with the set
// held there. A summary per function then says which mutexes a call of it
// may take, through the static calls it makes, and the checks compare.

// lockKey names a mutex by where it is declared: the named type whose
// field it is and the field's path ("engine.DB.mu"), a package variable
// ("pkg.name"), or a local one ("local name@file:line"). Two instances of
// a type share a key: the analysis cannot tell them apart.
type lockKey string

// held says where a mutex held at a point was taken.
type held struct {
	pos  token.Pos // the Lock, or the function held since its entry
	how  string    // "Lock", "RLock", "TryLock", or "its doc: ..." for one held on entry
	read bool      // taken shared (RLock, TryRLock)
}

// lockState is the set of mutexes held; nil when the point is unreachable.
type lockState map[lockKey]held

func (s lockState) clone() lockState {
	if s == nil {
		return nil
	}
	return maps.Clone(s)
}

// join merges b into a (the mutexes either holds: a may-analysis).
func join(a, b lockState) lockState {
	if a == nil {
		return b.clone()
	}
	if b == nil {
		return a
	}
	for k, h := range b {
		if _, ok := a[k]; !ok {
			a[k] = h
		}
	}
	return a
}

// covers reports whether a holds every mutex of b.
func covers(a, b lockState) bool {
	if b == nil {
		return true
	}
	if a == nil {
		return false
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return false
		}
	}
	return true
}

// lockSite is a Lock (or RLock, TryLock) of a mutex.
type lockSite struct {
	key   lockKey
	pos   token.Pos
	how   string
	try   bool // TryLock: never waits, so never deadlocks
	ok    bool // excused by a //lint:lockok on its line
	state lockState
	fn    *funcInfo
}

// callSite is a static call of a function of the analysed packages.
type callSite struct {
	callee string // its full name (types.Func.FullName)
	via    string // the interface it is called through, if it is
	pos    token.Pos
	ok     bool // excused by a //lint:lockok on its line: not followed
	state  lockState
	fn     *funcInfo
}

// funcInfo is one function or method declared in the analysed packages,
// or a function literal analysed on its own (run by go, or stored).
type funcInfo struct {
	name string // types.Func.FullName, or the literal's "func@file:line"
	pkg  *srcPkg
	decl *ast.FuncDecl // nil for a literal
	lit  *ast.FuncLit
	// pre: the mutexes its doc says its callers hold
	pre   lockState
	locks []*lockSite
	calls []*callSite
	// takes: the mutexes a call of it may take, with the first step
	// towards the Lock
	takes map[lockKey]*takeStep
	// exit: what it holds when it returns (for a helper that returns
	// with a lock held, or releases its caller's)
	exit lockState
	// paramHeld: what it holds where it calls a parameter of func type,
	// by the parameter's index (Front.Close calls finish under its lock)
	paramHeld map[int]lockState
}

// takeStep is how a function takes a mutex: the Lock itself, or a call of
// a function that takes it.
type takeStep struct {
	lock   *lockSite // the Lock, if this function takes it
	call   *callSite // else the call of the function that does
	callee *funcInfo
}

// okNote is a //lint:lockok annotation: its reason, and its own line.
type okNote struct {
	reason string
	line   int
}

// lockAnalysis is the analysis of a set of packages.
type lockAnalysis struct {
	fset  *token.FileSet
	root  string // the files are named relative to it
	funcs map[string]*funcInfo
	order []*funcInfo // in source order
	// okLines: the lines a //lint:lockok annotation covers, by file and
	// line, with its reason; used records those that excused a report
	okLines map[string]map[int]okNote
	used    map[string]map[int]bool
	// problems the analysis met in the source itself (an annotation
	// without a reason, a doc naming a lock that does not resolve)
	problems []string
	// analysed: the packages analysed, by path; named: their named
	// types but interfaces; impls: the implementations of an interface's
	// method, by "pkg.Iface.Method"
	analysed map[string]bool
	named    []*types.Named
	impls    map[string][]*funcInfo
	// fieldImpls: the functions stored in each struct field of func type
	fieldImpls map[*types.Var][]*funcInfo
	// what the checks found (analyseModule runs both at once)
	reentryMsgs, orderMsgs []string
	recvs                  map[*srcPkg]map[string]types.Type
}

func (a *lockAnalysis) recvNames(p *srcPkg) map[string]types.Type {
	if a.recvs == nil {
		a.recvs = map[*srcPkg]map[string]types.Type{}
	}
	if a.recvs[p] == nil {
		a.recvs[p] = receiverNames(p)
	}
	return a.recvs[p]
}

var mutexMethods = map[string]string{
	"(*sync.Mutex).Lock":      "Lock",
	"(*sync.Mutex).Unlock":    "Unlock",
	"(*sync.Mutex).TryLock":   "TryLock",
	"(*sync.RWMutex).Lock":    "Lock",
	"(*sync.RWMutex).Unlock":  "Unlock",
	"(*sync.RWMutex).TryLock": "TryLock",
	"(*sync.RWMutex).RLock":   "RLock",
	"(*sync.RWMutex).RUnlock": "RUnlock",
	// TryRLock as TryLock: it never waits
	"(*sync.RWMutex).TryRLock": "TryRLock",
}

// asyncCalls run the function they are given later or elsewhere, not
// during the call: a literal passed to them is analysed on its own, from
// no lock held. Any other call is taken to run a literal it is given
// before it returns (sort.Slice, sync.Once.Do, the engine's index.use).
var asyncCalls = map[string]bool{
	"time.AfterFunc":       true,
	"context.AfterFunc":    true,
	"(*sync.WaitGroup).Go": true,
	"runtime.SetFinalizer": true,
	"runtime.AddCleanup":   true,
}

// isMutex reports whether t is sync.Mutex or sync.RWMutex.
func isMutex(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != "sync" {
		return false
	}
	return n.Obj().Name() == "Mutex" || n.Obj().Name() == "RWMutex"
}

func deref(t types.Type) types.Type {
	if p, ok := types.Unalias(t).(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

// fieldStep is a field selected on the way to a mutex.
type fieldStep struct {
	owner types.Type // the struct (named or not) declaring it
	field *types.Var
}

// walkFields follows a selection's index path from t.
func walkFields(t types.Type, index []int) []fieldStep {
	var st []fieldStep
	for _, i := range index {
		owner := deref(t)
		s, ok := owner.Underlying().(*types.Struct)
		if !ok {
			return nil
		}
		f := s.Field(i)
		st = append(st, fieldStep{owner: owner, field: f})
		t = f.Type()
	}
	return st
}

// fieldPath returns the fields e selects (x.a.b: a then b) and the
// expression they are selected on.
func fieldPath(info *types.Info, e ast.Expr) (ast.Expr, []fieldStep) {
	e = stripRef(e)
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if s := info.Selections[sel]; s != nil && s.Kind() == types.FieldVal {
			root, st := fieldPath(info, sel.X)
			return root, append(st, walkFields(s.Recv(), s.Index())...)
		}
	}
	return e, nil
}

func stripRef(e ast.Expr) ast.Expr {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.UnaryExpr:
			if x.Op != token.AND {
				return e
			}
			e = x.X
		default:
			return e
		}
	}
}

// keyOf names the mutex reached from root through st: after the
// innermost named type on the way, or else after the variable root is.
// A mutex embedded in a struct field (pebble's mu struct{ sync.Mutex;
// ... }) is named after the field.
func (a *lockAnalysis) keyOf(info *types.Info, root ast.Expr, st []fieldStep) (lockKey, bool) {
	names := func(st []fieldStep) string {
		var ns []string
		for _, s := range st {
			ns = append(ns, s.field.Name())
		}
		if len(ns) > 1 && st[len(st)-1].field.Embedded() && isMutex(st[len(st)-1].field.Type()) {
			ns = ns[:len(ns)-1]
		}
		return strings.Join(ns, ".")
	}
	for j := len(st) - 1; j >= 0; j-- {
		if n, ok := types.Unalias(st[j].owner).(*types.Named); ok {
			n = n.Origin()
			return lockKey(typeName(n.Obj()) + "." + names(st[j:])), true
		}
	}
	id, ok := root.(*ast.Ident)
	if !ok {
		if ix, ok := root.(*ast.IndexExpr); ok { // mus[i]: every element is one lock
			r, st2 := fieldPath(info, ix.X)
			if k, ok := a.keyOf(info, r, st2); ok {
				k += "[]"
				if len(st) > 0 {
					k += lockKey("." + names(st))
				}
				return k, true
			}
		}
		return "", false
	}
	v, ok := info.Uses[id].(*types.Var)
	if !ok {
		if v, ok = info.Defs[id].(*types.Var); !ok {
			return "", false
		}
	}
	name := v.Name()
	if len(st) > 0 {
		name += "." + names(st)
	}
	if v.Parent() == v.Pkg().Scope() {
		return lockKey(shortPkg(v.Pkg().Path()) + "." + name), true
	}
	return lockKey("local " + name + "@" + a.where(v.Pos())), true
}

func typeName(o types.Object) string {
	if o.Pkg() == nil {
		return o.Name()
	}
	return shortPkg(o.Pkg().Path()) + "." + o.Name()
}

// shortPkg drops the module's path from a package path.
func shortPkg(p string) string {
	return strings.TrimPrefix(p, mod+"/")
}

// shortFunc is a function's full name without the module's path.
func shortFunc(n string) string {
	return strings.ReplaceAll(n, mod+"/", "")
}

func (a *lockAnalysis) where(p token.Pos) string {
	pos := a.fset.Position(p)
	name := pos.Filename
	if r, err := filepath.Rel(a.root, name); err == nil {
		name = r
	}
	return fmt.Sprintf("%s:%d", filepath.ToSlash(name), pos.Line)
}

// mutexOp returns the mutex operation call is (Lock, Unlock, ...) and
// the mutex, if it is one.
func (a *lockAnalysis) mutexOp(info *types.Info, call *ast.CallExpr) (op string, key lockKey, ok bool) {
	sel, isSel := stripRef(call.Fun).(*ast.SelectorExpr)
	if !isSel {
		return "", "", false
	}
	s := info.Selections[sel]
	if s == nil || s.Kind() != types.MethodVal {
		return "", "", false
	}
	op, ok = mutexMethods[s.Obj().(*types.Func).FullName()]
	if !ok {
		return "", "", false
	}
	root, st := fieldPath(info, sel.X)
	// The method's own path: the embedded mutex it is promoted from.
	if idx := s.Index(); len(idx) > 1 {
		st = append(st, walkFields(s.Recv(), idx[:len(idx)-1])...)
	}
	key, ok = a.keyOf(info, root, st)
	return op, key, ok
}

// implementations returns the methods a call through an interface of the
// analysed packages (store.Writer) may run: those of every type of the
// analysed packages that implements it. Interfaces of other packages (an
// io.Writer, an error) are not followed.
func (a *lockAnalysis) implementations(info *types.Info, call *ast.CallExpr) (string, []*funcInfo) {
	sel, ok := stripParen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return "", nil
	}
	s := info.Selections[sel]
	if s == nil || s.Kind() != types.MethodVal || !types.IsInterface(s.Recv()) {
		return "", nil
	}
	n, ok := types.Unalias(s.Recv()).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || !a.analysed[n.Obj().Pkg().Path()] {
		return "", nil
	}
	iface := n.Underlying().(*types.Interface)
	m := s.Obj().(*types.Func)
	key := typeName(n.Obj()) + "." + m.Name()
	if impls, ok := a.impls[key]; ok {
		return typeName(n.Obj()), impls
	}
	var impls []*funcInfo
	for _, t := range a.named {
		var recv types.Type
		switch {
		case types.Implements(t, iface):
			recv = t
		case types.Implements(types.NewPointer(t), iface):
			recv = types.NewPointer(t)
		default:
			continue
		}
		obj, _, _ := types.LookupFieldOrMethod(recv, false, m.Pkg(), m.Name())
		if f, ok := obj.(*types.Func); ok {
			if g := a.funcs[f.Origin().FullName()]; g != nil {
				impls = append(impls, g)
			}
		}
	}
	a.impls[key] = impls
	return typeName(n.Obj()), impls
}

// calleeOf returns the function a call calls, if it is static: a
// function, or a method of a concrete type (not through an interface).
func calleeOf(info *types.Info, call *ast.CallExpr) *types.Func {
	switch f := stripParen(call.Fun).(type) {
	case *ast.Ident:
		fn, _ := info.Uses[f].(*types.Func)
		return fn
	case *ast.SelectorExpr:
		if s := info.Selections[f]; s != nil {
			if s.Kind() != types.MethodVal {
				return nil // a field of func type, or a method expression
			}
			fn := s.Obj().(*types.Func)
			if types.IsInterface(fn.Type().(*types.Signature).Recv().Type()) {
				return nil
			}
			return fn.Origin()
		}
		fn, _ := info.Uses[f.Sel].(*types.Func) // pkg.F
		if fn != nil {
			return fn.Origin()
		}
	case *ast.IndexExpr: // F[T]
		if id, ok := stripParen(f.X).(*ast.Ident); ok {
			fn, _ := info.Uses[id].(*types.Func)
			return fn
		}
	}
	return nil
}

func stripParen(e ast.Expr) ast.Expr {
	for {
		p, ok := e.(*ast.ParenExpr)
		if !ok {
			return e
		}
		e = p.X
	}
}

// heldDoc finds the mutexes a function's doc says its callers hold:
// "Called with db.mu held", "called with f.mu and bmu held", "for a
// caller that holds db.mu". A name is a receiver's or a parameter's
// field path, or a field of the receiver. "Called with no lock held"
// names none.
var heldDoc = regexp.MustCompile(`(?i)(?:called (?:and returns )?with|caller (?:that )?holds|callers hold) ((?:[a-z_][\w.]*)(?:(?:,| and|,? or) [a-z_][\w.]*)*)('s)?(?: held)?`)

func (a *lockAnalysis) preOf(p *srcPkg, fd *ast.FuncDecl) lockState {
	if fd.Doc == nil {
		return nil
	}
	text := strings.Join(strings.Fields(fd.Doc.Text()), " ")
	var pre lockState
	for _, m := range heldDoc.FindAllStringSubmatch(text, -1) {
		if m[2] != "" {
			continue // "the caller holds s's lease": not a mutex
		}
		for _, name := range regexp.MustCompile(`,? and |, | or `).Split(m[1], -1) {
			name = strings.TrimSuffix(name, ".")
			switch name {
			case "no", "the", "its", "a", "it", "both", "all":
				continue // "Called with no lock held", "with the Front's lock held"
			}
			if c, ok := p.types.Scope().Lookup(name).(*types.Const); ok && c != nil {
				continue // a byte lock across processes (lockSync): not a mutex
			}
			key, err := a.resolveDoc(p, fd, name)
			if err != nil {
				a.problems = append(a.problems, fmt.Sprintf("%s: the doc of %s says it is called with %q held: %v", a.where(fd.Pos()), fd.Name.Name, name, err))
				continue
			}
			if pre == nil {
				pre = lockState{}
			}
			pre[key] = held{pos: fd.Pos(), how: fmt.Sprintf("held by its caller (its doc: %q)", m[0])}
		}
	}
	return pre
}

// receiverNames maps the receiver names of a package's methods to their
// types: a doc may say "db.mu" in a method of another type.
func receiverNames(p *srcPkg) map[string]types.Type {
	count := map[string]map[types.Type]int{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List[0].Names) == 0 {
				continue
			}
			name := fd.Recv.List[0].Names[0].Name
			t := p.info.Types[fd.Recv.List[0].Type].Type
			if t == nil {
				continue
			}
			if count[name] == nil {
				count[name] = map[types.Type]int{}
			}
			count[name][t]++
		}
	}
	out := map[string]types.Type{}
	for name, ts := range count {
		best := 0
		for t, n := range ts {
			if n > best || n == best && t.String() < out[name].String() {
				out[name], best = t, n
			}
		}
	}
	return out
}

// resolveDoc resolves a mutex named in fd's doc.
func (a *lockAnalysis) resolveDoc(p *srcPkg, fd *ast.FuncDecl, name string) (lockKey, error) {
	parts := strings.Split(name, ".")
	vars := map[string]*types.Var{}
	var recv *types.Var
	fn, _ := p.info.Defs[fd.Name].(*types.Func)
	if fn == nil {
		return "", fmt.Errorf("no function")
	}
	sig := fn.Type().(*types.Signature)
	if r := sig.Recv(); r != nil {
		recv = r
		vars[r.Name()] = r
	}
	for i := range sig.Params().Len() {
		vars[sig.Params().At(i).Name()] = sig.Params().At(i)
	}
	var t types.Type
	var root *types.Var
	if v, ok := vars[parts[0]]; ok {
		root, t, parts = v, v.Type(), parts[1:]
	} else if f, _, _ := types.LookupFieldOrMethod(recvType(recv), true, p.types, parts[0]); recv != nil && len(parts) > 1 && isField(f) {
		root, t = recv, recv.Type() // "m.mu" where m is a field of the receiver
	} else if rt, ok := a.recvNames(p)[parts[0]]; ok && len(parts) > 1 {
		// "db.mu" in a method of session: db as the package's methods
		// name their receiver of that type
		root, t, parts = types.NewVar(token.NoPos, p.types, parts[0], rt), rt, parts[1:]
	} else if recv != nil {
		root, t = recv, recv.Type() // a field of the receiver: "bmu"
	} else {
		return "", fmt.Errorf("%s is neither a parameter nor the receiver", parts[0])
	}
	var st []fieldStep
	for _, f := range parts {
		lookIn := p.types
		if n, ok := types.Unalias(deref(t)).(*types.Named); ok && n.Obj().Pkg() != nil {
			lookIn = n.Obj().Pkg() // its unexported fields: h.front.mu
		}
		obj, index, _ := types.LookupFieldOrMethod(t, true, lookIn, f)
		v, ok := obj.(*types.Var)
		if !ok || !v.IsField() {
			return "", fmt.Errorf("%s has no field %s", t, f)
		}
		st = append(st, walkFields(t, index)...)
		t = v.Type()
	}
	// A struct embedding the mutex stands for it.
	if !isMutex(t) {
		s, ok := deref(t).Underlying().(*types.Struct)
		found := false
		for i := 0; ok && i < s.NumFields(); i++ {
			if s.Field(i).Embedded() && isMutex(s.Field(i).Type()) {
				st = append(st, fieldStep{owner: deref(t), field: s.Field(i)})
				found = true
				break
			}
		}
		if !found {
			return "", fmt.Errorf("%s is not a mutex", name)
		}
	}
	// Name it as a Lock of it is named.
	id := ast.NewIdent(root.Name())
	info := &types.Info{Uses: map[*ast.Ident]types.Object{id: root}}
	key, ok := a.keyOf(info, id, st)
	if !ok {
		return "", fmt.Errorf("cannot name %s", name)
	}
	return key, nil
}

func recvType(recv *types.Var) types.Type {
	if recv == nil {
		return types.NewStruct(nil, nil)
	}
	return recv.Type()
}

func isField(o types.Object) bool {
	v, ok := o.(*types.Var)
	return ok && v.IsField()
}

// walker walks one function's statements.
type walker struct {
	a    *lockAnalysis
	fn   *funcInfo
	info *types.Info
	// targets: the statements a break or continue may leave (loops,
	// switches, selects), innermost last
	targets []*target
	// gotos: the states a goto brings to its label
	gotos map[string]lockState
	// grew: a goto brought a state its label had not had: walk again
	grew   bool
	labels map[string]lockState
	// lits: local variables bound once to a function literal (f :=
	// func() {...}), which a call f() walks in place
	lits map[types.Object]*ast.FuncLit
	// inlining: the literals being walked in place now (a literal that
	// calls itself is walked once)
	inlining map[*ast.FuncLit]bool
	// exit: the states at its returns
	exit lockState
	// hooks: the labels of the loops, switches and selects being walked
	hooks []*labelHook
	// deferred: the mutexes its deferred calls unlock
	deferred map[lockKey]bool
	// params: the function's parameters, by object, with their index
	params map[types.Object]int
}

type target struct {
	loop      bool
	breaks    lockState
	continues lockState
}

// analyseFunc walks fn's body from entry.
func (a *lockAnalysis) analyseFunc(fn *funcInfo, body *ast.BlockStmt, entry lockState) {
	w := &walker{a: a, fn: fn, info: fn.pkg.info, lits: map[types.Object]*ast.FuncLit{}, inlining: map[*ast.FuncLit]bool{}}
	w.gotos = map[string]lockState{}
	w.deferred = a.deferredUnlocks(w.info, body)
	w.params = map[types.Object]int{}
	if fn.decl != nil {
		if obj, ok := fn.pkg.info.Defs[fn.decl.Name].(*types.Func); ok {
			ps := obj.Type().(*types.Signature).Params()
			for i := range ps.Len() {
				w.params[ps.At(i)] = i
			}
		}
	}
	for range 8 {
		w.grew = false
		w.labels = map[string]lockState{}
		w.exit = nil
		fn.locks, fn.calls, fn.paramHeld = nil, nil, nil
		out := w.block(body.List, entry.clone())
		w.ret(out)
		if !w.grew {
			break
		}
	}
	fn.exit = w.exit
}

// ret records what a return holds: the mutexes held that no deferred
// Unlock releases.
func (w *walker) ret(s lockState) {
	if s == nil {
		return
	}
	e := lockState{}
	for k, h := range s {
		if !w.deferred[k] {
			e[k] = h
		}
	}
	w.exit = join(w.exit, e)
}

// deferredUnlocks returns the mutexes a function's deferred calls unlock
// (defer mu.Unlock(), or in a deferred literal), wherever the defer is.
func (a *lockAnalysis) deferredUnlocks(info *types.Info, body *ast.BlockStmt) map[lockKey]bool {
	out := map[lockKey]bool{}
	var unlocks func(n ast.Node)
	unlocks = func(n ast.Node) {
		ast.Inspect(n, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if op, key, ok := a.mutexOp(info, call); ok && (op == "Unlock" || op == "RUnlock") {
					out[key] = true
				}
			}
			return true
		})
	}
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncLit:
			return false // its own defers
		case *ast.DeferStmt:
			if lit, ok := stripParen(x.Call.Fun).(*ast.FuncLit); ok {
				unlocks(lit.Body)
			} else {
				unlocks(x.Call)
			}
			return false
		}
		return true
	})
	return out
}

func (w *walker) block(list []ast.Stmt, s lockState) lockState {
	for _, st := range list {
		s = w.stmt(st, s)
	}
	return s
}

func (w *walker) stmt(st ast.Stmt, s lockState) lockState {
	if s == nil {
		// Unreachable, but a label may be reached by a goto.
		if l, ok := st.(*ast.LabeledStmt); ok {
			return w.labeled(l, nil)
		}
		return nil
	}
	switch x := st.(type) {
	case *ast.ExprStmt:
		if call, ok := stripParen(x.X).(*ast.CallExpr); ok {
			if op, key, ok := w.a.mutexOp(w.info, call); ok {
				return w.mutex(op, key, call, s)
			}
			w.expr(x.X, s)
			if w.noReturn(call) {
				return nil
			}
			return s
		}
		w.expr(x.X, s)
	case *ast.DeferStmt:
		if _, _, ok := w.a.mutexOp(w.info, x.Call); ok {
			return s // defer mu.Unlock(): held to the end
		}
		// A deferred call runs at the end, with what is held then;
		// taken as what is held now (what the function takes after the
		// defer it mostly releases before its end).
		if lit, ok := stripParen(x.Call.Fun).(*ast.FuncLit); ok {
			w.exprs(x.Call.Args, s)
			w.inline(lit, s)
			return s
		}
		w.expr(x.Call, s.clone()) // (what it leaves held is not now)
	case *ast.GoStmt:
		// The arguments are evaluated here; the call runs elsewhere.
		w.exprs(x.Call.Args, s)
		w.expr(x.Call.Fun, s.clone())
		if lit, ok := stripParen(x.Call.Fun).(*ast.FuncLit); ok {
			w.a.alone(w.fn.pkg, lit)
		}
	case *ast.AssignStmt:
		w.exprs(x.Rhs, s)
		w.exprs(x.Lhs, s)
		if x.Tok == token.DEFINE && len(x.Lhs) == 1 && len(x.Rhs) == 1 {
			if lit, ok := stripParen(x.Rhs[0]).(*ast.FuncLit); ok {
				if id, ok := x.Lhs[0].(*ast.Ident); ok && w.info.Defs[id] != nil {
					w.lits[w.info.Defs[id]] = lit
				}
			}
		}
	case *ast.DeclStmt:
		ast.Inspect(x, func(n ast.Node) bool {
			if e, ok := n.(ast.Expr); ok {
				w.expr(e, s)
				return false
			}
			return true
		})
	case *ast.IncDecStmt:
		w.expr(x.X, s)
	case *ast.SendStmt:
		w.expr(x.Chan, s)
		w.expr(x.Value, s)
	case *ast.ReturnStmt:
		w.exprs(x.Results, s)
		w.ret(s)
		return nil
	case *ast.BlockStmt:
		return w.block(x.List, s)
	case *ast.IfStmt:
		if x.Init != nil {
			s = w.stmt(x.Init, s)
			if s == nil {
				return nil
			}
		}
		w.expr(x.Cond, s)
		thenS, elseS := s.clone(), s.clone()
		// if mu.TryLock() { ... } / if !mu.TryLock() { return }
		if call, neg := tryLockCond(x.Cond); call != nil {
			if op, key, ok := w.a.mutexOp(w.info, call); ok && (op == "TryLock" || op == "TryRLock") {
				h := held{pos: call.Pos(), how: op, read: op == "TryRLock"}
				w.fn.locks = append(w.fn.locks, &lockSite{key: key, pos: call.Pos(), how: op, try: true, state: s.clone(), fn: w.fn})
				if neg {
					elseS[key] = h
				} else {
					thenS[key] = h
				}
			}
		}
		out := w.block(x.Body.List, thenS)
		if x.Else != nil {
			elseS = w.stmt(x.Else, elseS)
		}
		return join(out, elseS)
	case *ast.ForStmt:
		if x.Init != nil {
			s = w.stmt(x.Init, s)
			if s == nil {
				return nil
			}
		}
		return w.loop(x.Body, s, func(h lockState) {
			if x.Cond != nil {
				w.expr(x.Cond, h)
			}
		}, func(c lockState) lockState {
			if x.Post != nil {
				return w.stmt(x.Post, c)
			}
			return c
		}, x.Cond != nil)
	case *ast.RangeStmt:
		w.expr(x.X, s)
		return w.loop(x.Body, s, func(lockState) {}, func(c lockState) lockState { return c }, true)
	case *ast.SwitchStmt:
		if x.Init != nil {
			s = w.stmt(x.Init, s)
			if s == nil {
				return nil
			}
		}
		if x.Tag != nil {
			w.expr(x.Tag, s)
		}
		return w.cases(x.Body, s, false)
	case *ast.TypeSwitchStmt:
		if x.Init != nil {
			s = w.stmt(x.Init, s)
			if s == nil {
				return nil
			}
		}
		s = w.stmt(x.Assign, s)
		return w.cases(x.Body, s, false)
	case *ast.SelectStmt:
		return w.cases(x.Body, s, true)
	case *ast.LabeledStmt:
		return w.labeled(x, s)
	case *ast.BranchStmt:
		return w.branch(x, s)
	}
	return s
}

// noReturn reports whether a call never returns (panic, os.Exit,
// log.Fatal...).
func (w *walker) noReturn(call *ast.CallExpr) bool {
	if id, ok := stripParen(call.Fun).(*ast.Ident); ok {
		if b, ok := w.info.Uses[id].(*types.Builtin); ok && b.Name() == "panic" {
			return true
		}
	}
	if fn := calleeOf(w.info, call); fn != nil {
		switch fn.FullName() {
		case "os.Exit", "log.Fatal", "log.Fatalf", "log.Panic", "log.Panicf", "runtime.Goexit":
			return true
		}
	}
	return false
}

// tryLockCond returns the TryLock call a condition is, and whether it is
// negated.
func tryLockCond(e ast.Expr) (*ast.CallExpr, bool) {
	e = stripParen(e)
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.NOT {
		c, neg := tryLockCond(u.X)
		return c, !neg
	}
	c, _ := e.(*ast.CallExpr)
	return c, false
}

func (w *walker) mutex(op string, key lockKey, call *ast.CallExpr, s lockState) lockState {
	switch op {
	case "Lock", "RLock":
		w.fn.locks = append(w.fn.locks, &lockSite{key: key, pos: call.Pos(), how: op, state: s.clone(), fn: w.fn, ok: w.a.excused(call.Pos())})
		s = s.clone()
		s[key] = held{pos: call.Pos(), how: op, read: op == "RLock"}
	case "Unlock", "RUnlock":
		s = s.clone()
		delete(s, key)
	}
	// A TryLock whose result is not a condition: the analysis does not
	// know whether it holds the mutex afterwards, and assumes not.
	return s
}

// loop walks a loop to a fixpoint: the state at its head is what enters
// joined with what each round brings back.
func (w *walker) loop(body *ast.BlockStmt, s lockState, head func(lockState), post func(lockState) lockState, mayExit bool) lockState {
	t := w.pushTarget(true)
	defer w.popTarget()
	h := s.clone()
	for range 8 {
		head(h)
		t.breaks, t.continues = nil, nil
		out := w.block(body.List, h.clone())
		back := post(join(out, t.continues.clone()))
		if covers(h, back) {
			break
		}
		h = join(h, back)
	}
	var exit lockState
	if mayExit {
		exit = h.clone()
	}
	return join(exit, t.breaks)
}

// cases walks the clauses of a switch or select: each from s (a switch
// without default may take none of them).
func (w *walker) cases(body *ast.BlockStmt, s lockState, isSelect bool) lockState {
	t := w.pushTarget(false)
	defer w.popTarget()
	var out lockState
	hasDefault := false
	var fall lockState
	for _, c := range body.List {
		var list []ast.Stmt
		entry := s.clone()
		switch cc := c.(type) {
		case *ast.CaseClause:
			if cc.List == nil {
				hasDefault = true
			}
			w.exprs(cc.List, s)
			list = cc.Body
		case *ast.CommClause:
			if cc.Comm == nil {
				hasDefault = true
			} else {
				entry = w.stmt(cc.Comm, entry)
			}
			list = cc.Body
		}
		entry = join(entry, fall)
		fall = nil
		end := w.block(list, entry)
		if n := len(list); n > 0 {
			if b, ok := list[n-1].(*ast.BranchStmt); ok && b.Tok == token.FALLTHROUGH {
				fall = end
				continue
			}
		}
		out = join(out, end)
	}
	if !hasDefault && !isSelect {
		out = join(out, s.clone())
	}
	return join(out, t.breaks)
}

func (w *walker) pushTarget(loop bool) *target {
	t := &target{loop: loop}
	w.targets = append(w.targets, t)
	return t
}

func (w *walker) popTarget() { w.targets = w.targets[:len(w.targets)-1] }

func (w *walker) labeled(l *ast.LabeledStmt, s lockState) lockState {
	name := l.Label.Name
	s = join(s.clone(), w.gotos[name])
	w.labels[name] = s.clone()
	if s == nil {
		return nil
	}
	switch x := l.Stmt.(type) {
	case *ast.ForStmt, *ast.RangeStmt, *ast.SwitchStmt, *ast.TypeSwitchStmt, *ast.SelectStmt:
		// Mark the next target pushed with the label.
		return w.withLabel(name, x, s)
	}
	return w.stmt(l.Stmt, s)
}

// withLabel walks a labelled loop, switch or select so that break and
// continue with the label find it.
func (w *walker) withLabel(name string, st ast.Stmt, s lockState) lockState {
	n := len(w.targets)
	pending := &labelHook{name: name, depth: n}
	w.hooks = append(w.hooks, pending)
	defer func() { w.hooks = w.hooks[:len(w.hooks)-1] }()
	return w.stmt(st, s)
}

type labelHook struct {
	name  string
	depth int
}

func (w *walker) branch(b *ast.BranchStmt, s lockState) lockState {
	switch b.Tok {
	case token.BREAK, token.CONTINUE:
		t := w.findTarget(b)
		if t == nil {
			return nil
		}
		if b.Tok == token.BREAK {
			t.breaks = join(t.breaks, s.clone())
		} else {
			t.continues = join(t.continues, s.clone())
		}
		return nil
	case token.GOTO:
		name := b.Label.Name
		w.gotos[name] = join(w.gotos[name].clone(), s.clone())
		if l, seen := w.labels[name]; seen && !covers(l, w.gotos[name]) {
			w.grew = true // a goto back: walk again with it
		}
		return nil
	case token.FALLTHROUGH:
		return s // cases takes the state on
	}
	return nil
}

// findTarget returns what a break or continue leaves.
func (w *walker) findTarget(b *ast.BranchStmt) *target {
	if b.Label == nil {
		for i := len(w.targets) - 1; i >= 0; i-- {
			if b.Tok == token.BREAK || w.targets[i].loop {
				return w.targets[i]
			}
		}
		return nil
	}
	for i := len(w.hooks) - 1; i >= 0; i-- {
		if h := w.hooks[i]; h.name == b.Label.Name && h.depth < len(w.targets) {
			return w.targets[h.depth]
		}
	}
	return nil
}

func (w *walker) exprs(es []ast.Expr, s lockState) {
	for _, e := range es {
		w.expr(e, s)
	}
}

// expr records the calls in e, held s. Function literals: one called at
// once, or passed to a call (most run during it: sort.Slice, index.use),
// is walked in place; one bound to a variable, when the variable is
// called; any other is analysed on its own, from no lock held.
func (w *walker) expr(e ast.Expr, s lockState) {
	if e == nil || s == nil {
		return
	}
	ast.Inspect(e, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncLit:
			w.a.alone(w.fn.pkg, x)
			return false
		case *ast.CallExpr:
			w.call(x, s)
			return false
		}
		return true
	})
}

func (w *walker) call(call *ast.CallExpr, s lockState) {
	fun := stripParen(call.Fun)
	if lit, ok := fun.(*ast.FuncLit); ok {
		w.inline(lit, s)
	} else {
		w.expr(fun, s)
		if id, ok := fun.(*ast.Ident); ok {
			if lit := w.lits[w.info.Uses[id]]; lit != nil {
				w.inline(lit, s)
			}
			if i, ok := w.params[w.info.Uses[id]]; ok {
				w.paramCalled(i, s)
			}
		}
	}
	// The callee: a function of the analysed packages (g), another static
	// one (fn), or unknown (a func value, an interface's method).
	fn := calleeOf(w.info, call)
	var g *funcInfo
	if fn != nil {
		g = w.a.funcs[fn.FullName()]
	}
	if g != nil {
		c := &callSite{callee: g.name, pos: call.Pos(), state: s.clone(), fn: w.fn, ok: w.a.excused(call.Pos())}
		w.fn.calls = append(w.fn.calls, c)
		defer func() {
			if !c.ok {
				w.effects(g, c, s)
			}
		}()
	}
	if fn == nil {
		// Through an interface of the module: each implementation; through
		// a field of func type: each function stored in it.
		iface, impls := w.a.implementations(w.info, call)
		if impls == nil {
			iface, impls = w.a.fieldCallees(w.info, call)
		}
		for _, g := range impls {
			w.fn.calls = append(w.fn.calls, &callSite{callee: g.name, via: iface, pos: call.Pos(), state: s.clone(), fn: w.fn, ok: w.a.excused(call.Pos())})
		}
	}
	for i, arg := range call.Args {
		arg = stripParen(arg)
		var lit *ast.FuncLit
		switch a := arg.(type) {
		case *ast.FuncLit:
			lit = a
		case *ast.Ident:
			// A parameter passed on (finish to a helper that calls it).
			if j, ok := w.params[w.info.Uses[a]]; ok && g != nil {
				if st, called := g.paramHeld[i]; called {
					w.paramCalled(j, join(s.clone(), w.heldByCallee(g, i, st, call.Pos())))
				}
			}
		}
		if lit == nil {
			w.expr(arg, s)
			continue
		}
		switch {
		case g != nil:
			// It runs where g calls it, with what g holds there too; if
			// g never calls it itself, elsewhere.
			if st, called := g.paramHeld[i]; called {
				w.inline(lit, join(s.clone(), w.heldByCallee(g, i, st, call.Pos())))
			} else {
				w.a.alone(w.fn.pkg, lit)
			}
		case fn != nil && !asyncCalls[fn.FullName()]:
			w.inline(lit, s) // sort.Slice, sync.Once.Do: during the call
		default:
			w.a.alone(w.fn.pkg, lit) // a timer's, a goroutine's, unknown
		}
	}
}

// paramCalled records that the function calls its parameter i (or has
// it called) holding s.
func (w *walker) paramCalled(i int, s lockState) {
	if w.fn.paramHeld == nil {
		w.fn.paramHeld = map[int]lockState{}
	}
	w.fn.paramHeld[i] = join(w.fn.paramHeld[i], s.clone())
}

// heldByCallee is what g holds where it calls its parameter i, named as
// such for a literal passed at pos.
func (w *walker) heldByCallee(g *funcInfo, i int, st lockState, pos token.Pos) lockState {
	out := lockState{}
	for _, k := range sortedKeys(st) {
		h := st[k]
		h.how = fmt.Sprintf("%s at %s, held by %s where it calls the function passed", h.how, w.a.where(h.pos), shortFunc(g.name))
		h.pos = pos
		out[k] = h
	}
	return out
}

// effects applies to s what a call of g leaves: a mutex g returns
// holding (a helper that locks for its caller), or one its caller held
// that it releases.
func (w *walker) effects(g *funcInfo, c *callSite, s lockState) {
	if g.exit == nil {
		return // it does not return, or is not analysed yet
	}
	for _, k := range sortedKeys(g.exit) {
		if _, pre := g.pre[k]; !pre {
			if _, ok := s[k]; !ok {
				h := g.exit[k]
				s[k] = held{pos: c.pos, how: fmt.Sprintf("taken by %s (%s at %s), which returns holding it,", shortFunc(g.name), h.how, w.a.where(h.pos)), read: h.read}
			}
		}
	}
	for k := range g.pre {
		if _, ok := g.exit[k]; !ok {
			delete(s, k)
		}
	}
}

// inline walks a literal's body in place, from s; what it leaves held is
// not carried on (a literal that returns holding a lock is not seen).
func (w *walker) inline(lit *ast.FuncLit, s lockState) {
	if w.inlining[lit] {
		return
	}
	w.inlining[lit] = true
	saveT, saveH, saveExit, saveD := w.targets, w.hooks, w.exit, w.deferred
	w.targets, w.hooks, w.exit = nil, nil, nil // (its returns are its own)
	w.deferred = w.a.deferredUnlocks(w.info, lit.Body)
	w.block(lit.Body.List, s.clone())
	w.targets, w.hooks, w.exit, w.deferred = saveT, saveH, saveExit, saveD
	delete(w.inlining, lit)
}

// alone records a literal that runs elsewhere (go func, a stored
// callback), to be analysed on its own from no lock held.
func (a *lockAnalysis) alone(p *srcPkg, lit *ast.FuncLit) *funcInfo {
	name := "func@" + a.where(lit.Pos())
	if fn, ok := a.funcs[name]; ok {
		return fn
	}
	fn := &funcInfo{name: name, pkg: p, lit: lit}
	a.funcs[name] = fn
	a.order = append(a.order, fn)
	return fn
}

// funcFields records the functions stored in struct fields of func type
// (placement{register: func...}, cfg.AfterFunc = ...): a call of the
// field calls one of them.
func (a *lockAnalysis) funcFields(p *srcPkg, f *ast.File) {
	store := func(field *types.Var, v ast.Expr) {
		if _, ok := field.Type().Underlying().(*types.Signature); !ok {
			return
		}
		var fn *funcInfo
		switch x := stripParen(v).(type) {
		case *ast.FuncLit:
			fn = a.alone(p, x)
		case *ast.Ident, *ast.SelectorExpr:
			var obj types.Object
			if id, ok := x.(*ast.Ident); ok {
				obj = p.info.Uses[id]
			} else {
				obj = p.info.Uses[x.(*ast.SelectorExpr).Sel]
			}
			if f, ok := obj.(*types.Func); ok {
				fn = a.funcs[f.Origin().FullName()]
			}
		}
		if fn != nil && !slices.Contains(a.fieldImpls[field], fn) {
			a.fieldImpls[field] = append(a.fieldImpls[field], fn)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.CompositeLit:
			tv, ok := p.info.Types[x]
			if !ok {
				return true
			}
			st, ok := deref(tv.Type).Underlying().(*types.Struct)
			if !ok {
				return true
			}
			for i, e := range x.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok {
						for j := range st.NumFields() {
							if st.Field(j).Name() == id.Name {
								store(st.Field(j), kv.Value)
							}
						}
					}
				} else if i < st.NumFields() {
					store(st.Field(i), e)
				}
			}
		case *ast.AssignStmt:
			if len(x.Lhs) != len(x.Rhs) {
				return true
			}
			for i, l := range x.Lhs {
				if sel, ok := stripParen(l).(*ast.SelectorExpr); ok {
					if s := p.info.Selections[sel]; s != nil && s.Kind() == types.FieldVal {
						store(s.Obj().(*types.Var), x.Rhs[i])
					}
				}
			}
		}
		return true
	})
}

// fieldCallees returns the functions a call of a struct field of func
// type may call: those stored in it.
func (a *lockAnalysis) fieldCallees(info *types.Info, call *ast.CallExpr) (string, []*funcInfo) {
	sel, ok := stripParen(call.Fun).(*ast.SelectorExpr)
	if !ok {
		return "", nil
	}
	s := info.Selections[sel]
	if s == nil || s.Kind() != types.FieldVal {
		return "", nil
	}
	field := s.Obj().(*types.Var)
	st := walkFields(s.Recv(), s.Index())
	owner := "?"
	if len(st) > 0 {
		if n, ok := types.Unalias(st[len(st)-1].owner).(*types.Named); ok {
			owner = typeName(n.Obj())
		}
	}
	return "the func field " + owner + "." + field.Name(), a.fieldImpls[field]
}
