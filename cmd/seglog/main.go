package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes of the CLI (helpExitCodes documents them for seglog help).
const (
	exitOK     = 0 // the command did all it was asked
	exitFailed = 1 // it failed, or did only part of its work (check found problems, import refused logs, export left sessions out, segments could not scan a file)
	exitUsage  = 2 // the command line was wrong: unknown command or flag, bad flag value, wrong arguments; nothing was done
)

// helpExitCodes is the end of seglog help: the exit codes and which
// command creates a store.
const helpExitCodes = `Exit codes (each command's in seglog help COMMAND):
  0  ok: the command did all it was asked
  1  failed, or did only part of its work: check found problems, import refused
     some logs, export could not write some sessions, copy could not copy some,
     retain could not delete some, segments could not scan some files (each is
     listed); the store or session is missing or damaged
  2  usage error: unknown command or flag, bad flag value, wrong arguments;
     nothing was done

Only import (in --dir) and copy (in its --to) create a store, and the directory,
if missing (an import that stores no session removes the store it created). Every
other command fails on a directory that holds no store (no
*.seg files and no index.db) and creates nothing. copy and retain also reach a
NATS JetStream stream by its address (nats://host:4222).
`

// errProblems makes check exit 1 after printing its report.
var errProblems = errors.New("problems found")

// partialError: the command did part of its work and printed what it could
// not do, item by item, on stdout; it exits 1 with this summary.
type partialError struct{ msg string }

func (e partialError) Error() string { return e.msg }

// run executes the CLI and returns the exit code (exitOK, exitFailed,
// exitUsage). An error is printed once, on stderr, after one "seglog: ".
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	args = normalize(args)
	if c, _, err := root.Find(args); err == nil && c.Name() == "bench" {
		args = joinJSONValue(args)
	}
	root.SetArgs(args)
	err := root.Execute()
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errProblems):
		return exitFailed
	case isUsage(err):
		fmt.Fprintln(stderr, "seglog:", untag(err.Error()))
		fmt.Fprintln(stderr, "Run 'seglog help' for usage.")
		return exitUsage
	}
	fmt.Fprintln(stderr, "seglog:", untag(err.Error()))
	return exitFailed
}

// usageError is a wrong command line.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func isUsage(err error) bool {
	var u usageError
	// An unknown command is found by cobra before any of ours runs.
	return errors.As(err, &u) || strings.HasPrefix(err.Error(), "unknown command")
}

// usageArgs makes a command's argument check a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if check == nil {
			return nil
		}
		if err := check(cmd, args); err != nil {
			return usageError{fmt.Errorf("%s: %w", cmd.Name(), err)}
		}
		return nil
	}
}

// packageTags are the prefixes seglog's packages put in front of their
// errors ("engine: ", "seglog: "); wrapped through several layers they
// stutter, so the CLI prints none of them and one "seglog: " in front.
var packageTags = []string{"seglog: ", "engine: ", "segment: ", "index: ", "handle: ", "vfs: ",
	"jsonl: ", "recovery: ", "event: ", "plan: ", "bench: "}

// untag drops the package tags at the start of msg and after each ": "
// that separates wrapped errors. Quoted text (a %q session id) is kept as
// it is.
func untag(msg string) string {
	var b strings.Builder
	quoted, boundary := false, true
	for i := 0; i < len(msg); {
		if boundary && !quoted {
			if tag := tagAt(msg[i:]); tag > 0 {
				i += tag
				continue
			}
			boundary = false
		}
		c := msg[i]
		switch {
		case quoted && c == '\\' && i+1 < len(msg):
			b.WriteString(msg[i : i+2])
			i += 2
			continue
		case c == '"':
			quoted = !quoted
		case !quoted && c == ':' && strings.HasPrefix(msg[i:], ": "):
			b.WriteString(": ")
			i += 2
			boundary = true
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// tagAt is the length of the package tag s starts with, or 0.
func tagAt(s string) int {
	for _, t := range packageTags {
		if strings.HasPrefix(s, t) {
			return len(t)
		}
	}
	return 0
}

// normalize accepts Go-style single-dash long flags (-dir, -events) as
// well as --dir.
func normalize(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			a = "-" + a
		}
		out[i] = a
	}
	return out
}

func defaultDir() string {
	if d := os.Getenv("SEGLOG_DIR"); d != "" {
		return d
	}
	return "./seglog-data"
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "seglog",
		Short:         "seglog stores and inspects the event logs of agent sessions",
		Long:          "seglog stores and inspects the event logs of agent sessions.\n\n" + helpExitCodes,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	var dir string
	root.PersistentFlags().StringVar(&dir, "dir", defaultDir(), "the store directory ($SEGLOG_DIR, else ./seglog-data)")
	root.AddCommand(newBenchCmd(stdout, stderr, &dir), newCheckCmd(stdout, &dir), newLsCmd(stdout, &dir),
		newStatsCmd(stdout, &dir), newCatCmd(stdout, &dir), newInspectCmd(stdout, &dir), newSegmentsCmd(stdout, &dir),
		newImportCmd(stdout, stderr, &dir), newExportCmd(stdout, &dir), newDeleteCmd(stdout, &dir),
		newTailCmd(stdout, &dir), newCompactCmd(stdout, &dir), newMigrateCmd(stdout, &dir), newTypesCmd(stdout, &dir),
		newCopyCmd(stdout, &dir), newRetainCmd(stdout, &dir), newChangesCmd(stdout, &dir), newSearchCmd(stdout, &dir),
		newMcpCmd(stdout, &dir))
	root.AddCommand(newUICmd(stdout, &dir))
	for _, c := range root.Commands() {
		c.Args = usageArgs(c.Args)
	}
	describe(root)
	return root
}
