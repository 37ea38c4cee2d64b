// Package lint enforces seglog's conventions as tests: the layering of
// docs/DESIGN.md#layering (lower packages never import higher ones, pure
// packages do no I/O) and the module boundaries of docs/DESIGN.md#modules
// (the core module depends on five modules only; go.work, the README's
// test command and .ci/run name every module), and what else the code
// and its docs must keep to, each rule a test below. It has no non-test
// code.
//
// TestNoPackageTestHooks (testhooks_test.go) keeps test knobs per DB:
// no package-level variable of func type or named testHook* in the core
// module's non-test files, and no test assigning a package variable of
// its package (a tuning overridden for the whole test binary), but the
// few it lists as left.
// TestStoresChecked (storecheck_test.go) keeps the end-of-test store
// check on every store a test makes: no _test.go file, in any module,
// calls engine.Open itself (but the helpers' own files and godoc's
// Example functions); tests open stores with engine.OpenStore,
// enginetest.OpenStore or, for a store no check can see, OpenUnchecked
// with the reason.
//
// # Locks
//
// locks_test.go checks the mutexes (sync.Mutex, sync.RWMutex) of the core
// module's packages statically, with go/parser and go/types alone
// (golang.org/x/tools is not a dependency of the core module), in a few
// seconds:
//
//   - TestLockReentry: no function takes a mutex it may already hold, by
//     a Lock of its own or through a call (issue 35: keptLive held db.mu
//     and called poisonWith, which takes it: Go's mutexes are not
//     re-entrant, and the store hung). A read lock taken twice counts
//     too: a writer waiting between them blocks both.
//   - TestLockOrder: no two mutexes are taken in both orders (one held
//     while the other is taken, somewhere, and the other way round
//     elsewhere), nor in a longer cycle. With -v it logs an order every
//     pair taken together keeps.
//
// A mutex is named by where it is declared: the field of a named type
// (engine.DB.mu for pebble's mu struct{ sync.Mutex; ... }; a mutex
// embedded in a type, store.Front.Mutex), or a variable. Each function
// is walked in statement order with the set of mutexes it may hold: a
// Lock adds, an Unlock removes, branches join (an if that unlocks and
// returns leaves the rest holding), loops and gotos go round to a
// fixpoint, a deferred Unlock holds to the end; if mu.TryLock() holds in
// its branch. A function holds on entry what its doc says its callers
// hold: "Called with db.mu held", "Called and returns with a.queue held",
// "for a caller that holds db.mu" (a name is a parameter's or the
// receiver's field path, as the package's methods name their receivers;
// a doc naming something that is not a mutex of it fails the test, a
// byte lock constant such as lockSync is skipped). What a function may
// take is what it locks (but what it holds on entry) and what the
// functions it calls take: static calls of functions and methods of the
// module, calls through an interface of the module (store.Writer) to
// every implementation in the module, a function literal called at once
// or bound to a variable and called, or passed to a function that calls
// it (with what that function holds where it calls it: indexFile.use
// runs fn under its mutex, store.Front.Close runs finish under its
// lock), and calls of a struct field of func type to every function
// stored in one in the module (placeLocked runs placement.register under
// db.mu). A helper that returns holding a mutex (lockOpen) leaves its
// caller holding it.
//
// Its limits: it cannot tell two instances of a type apart (another
// DB's mu is db's to it); it is path-insensitive (a branch taken only for
// a read handle is still walked); calls through other func values
// (a variable, a parameter passed on to an unknown function, a method
// value) and through interfaces of other packages are not followed; a
// literal started by go
// or handed to something that runs it later is analysed on its own, from
// nothing held; a deferred call is checked against what is held where it
// is deferred; waits that are not mutexes (a channel, a sync.Cond, a
// WaitGroup held across a Lock) are not seen. Where it is wrong, a
// comment "//lint:lockok reason" on the line of the call or Lock (or on
// the line before) makes it skip that call: it is neither reported nor
// counted in what its function takes. An annotation without a reason,
// or on a line with no call or Lock the check follows, fails the test.
// testdata/
// lockcheck holds the patterns and what each must report
// (TestLockChecksFixture).
//
// TestEngineLockOrder holds engine/doc.go's lock order, a list of the
// engine's mutexes outermost first, against the pairs the analysis finds:
// each pair in the list's order, each mutex taken with another listed, no
// listed one gone. TestReadingTheSource holds docs/DESIGN.md's "Reading
// the source" (the hops of Append, Flush, Read and Wait) against the code:
// each function it names is declared in the file named before it.
//
// The docs (docs_test.go): TestDocSizes keeps every .md file at most 120
// KB and README.md at most 250 lines; TestDocLinks checks that every
// relative link of the .md files names a file that exists and, into a .md
// file, a heading it has (by GitHub's anchors); TestReadmeFirstHost holds
// README's first host to engine's package example (engine/example_test.go),
// which go test runs; TestCodeDocRefs checks that every doc a .go file
// names by its path (under docs/, with an anchor or not) exists and has
// the heading the anchor names.
package lint
