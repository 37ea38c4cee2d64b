package engine

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine/internal/dict"
)

// shareOfCore spells a share of one core as the docs do: "a tenth", "a
// quarter", ... for the shares they name, else a percentage.
func shareOfCore(share float64) string {
	for n, name := range map[int]string{2: "half", 4: "a quarter", 5: "a fifth", 10: "a tenth", 20: "a twentieth"} {
		if share == 1/float64(n) {
			return name + " of a core"
		}
	}
	return fmt.Sprintf("%g%% of a core", share*100)
}

// TestDictBudgetDocs checks that every doc that gives the dictionary's
// CPU budget gives the figure the code uses (dict.DefaultTuning's
// SmallShare): the Options.NoDict doc (go doc engine.Options), the
// guide (docs/GUIDE.md, Disk use, moved out of README.md in issue 48),
// the format (docs/FORMAT.md, Dictionaries, moved out of docs/DESIGN.md)
// and segment's comment; and that none gives another share of a core.
func TestDictBudgetDocs(t *testing.T) {
	want := shareOfCore(dict.DefaultTuning().SmallShare)
	space := regexp.MustCompile(`\s+(//\s*)?`)
	other := regexp.MustCompile(`(half|a quarter|a fifth|a tenth|a twentieth|[0-9.]+%) of a core`)
	for _, path := range []string{"options.go", "../docs/GUIDE.md", "../docs/FORMAT.md", "../segment/dict.go"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		text := space.ReplaceAllString(string(b), " ") // a comment's or paragraph's line breaks
		if !strings.Contains(text, want) {
			t.Errorf("%s does not give the dictionary's budget as %q", path, want)
		}
		for _, m := range other.FindAllString(text, -1) {
			if m != want {
				t.Errorf("%s gives a budget of %q, the code's is %q", path, m, want)
			}
		}
	}
}
