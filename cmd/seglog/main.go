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

// errProblems makes check exit 1 after printing its report.
var errProblems = errors.New("problems found")

// run executes the CLI and returns the exit code: 0 ok, 1 a failure or
// problems found, 2 a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(normalize(args))
	err := root.Execute()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errProblems):
		return 1
	case isUsage(err):
		fmt.Fprintln(stderr, "seglog:", err)
		return 2
	}
	fmt.Fprintln(stderr, "seglog:", err)
	return 1
}

type usageError struct{ error }

func isUsage(err error) bool {
	var u usageError
	return errors.As(err, &u) || strings.Contains(err.Error(), "unknown command") ||
		strings.Contains(err.Error(), "unknown flag") || strings.Contains(err.Error(), "unknown shorthand")
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
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	var dir string
	root.PersistentFlags().StringVar(&dir, "dir", defaultDir(), "the store directory ($SEGLOG_DIR, else ./seglog-data)")
	root.AddCommand(newBenchCmd(stdout, stderr, &dir), newCheckCmd(stdout, &dir), newLsCmd(stdout, &dir),
		newStatsCmd(stdout, &dir), newCatCmd(stdout, &dir), newSegmentsCmd(stdout, &dir),
		newImportCmd(stdout, stderr, &dir), newExportCmd(stdout, &dir), newDeleteCmd(stdout, &dir),
		newTailCmd(stdout, &dir), newCompactCmd(stdout, &dir), newMigrateCmd(stdout, &dir))
	return root
}
