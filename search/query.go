package search

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxQueryBytes and MaxQueryTerms bound a query: a longer one is a
// *QueryError, not a slow search.
const (
	MaxQueryBytes = 4096
	MaxQueryTerms = 64
)

// term is one word or phrase of a query.
type term struct {
	text   string // as written, unquoted
	phrase bool
	prefix bool // word*
	neg    bool // NOT word, -word
	off    int
}

// parsed is a query as AND of groups, each an OR of terms, and the terms
// it excludes.
type parsed struct {
	groups    [][]term
	not       []term
	substring bool // some term goes through the trigram index
}

func qerr(q string, off int, format string, a ...any) error {
	return &QueryError{Query: cut(q, 80), Offset: off, Problem: fmt.Sprintf(format, a...)}
}

// isCJK reports a rune of a script written without spaces between words,
// which unicode61 cannot split into words: it is searched by trigrams.
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul, unicode.Thai)
}

// parse reads q: words (all must match), "phrases", prefix*, OR between
// two terms, NOT term and -term. substring forces every term through the
// trigram index; a term with CJK text goes there anyway.
func parse(q string, substring bool) (*parsed, error) {
	if len(q) > MaxQueryBytes {
		return nil, qerr(q, -1, "%d bytes, longer than the %d a query may hold", len(q), MaxQueryBytes)
	}
	if !utf8.ValidString(q) {
		i := 0
		for i < len(q) {
			r, n := utf8.DecodeRuneInString(q[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return nil, qerr(q, i, "not valid UTF-8")
	}
	for i, r := range q {
		if r == 0 {
			return nil, qerr(q, i, "a NUL byte")
		}
		if unicode.IsControl(r) && !unicode.IsSpace(r) {
			return nil, qerr(q, i, "control character %U", r)
		}
	}
	p := &parsed{substring: substring}
	var toks []term
	i := 0
	for i < len(q) {
		r, n := utf8.DecodeRuneInString(q[i:])
		if unicode.IsSpace(r) {
			i += n
			continue
		}
		start := i
		neg := false
		if r == '-' {
			neg = true
			i++
			if i >= len(q) || q[i] == ' ' {
				return nil, qerr(q, start, "a lone '-' (write -word to exclude a word)")
			}
		}
		if q[i] == '"' {
			end := strings.IndexByte(q[i+1:], '"')
			if end < 0 {
				return nil, qerr(q, i, "unclosed quote")
			}
			body := q[i+1 : i+1+end]
			if strings.TrimSpace(body) == "" {
				return nil, qerr(q, i, "an empty phrase")
			}
			toks = append(toks, term{text: body, phrase: true, neg: neg, off: start})
			i += end + 2
			continue
		}
		j := i
		for j < len(q) {
			r, n := utf8.DecodeRuneInString(q[j:])
			if unicode.IsSpace(r) || r == '"' {
				break
			}
			j += n
		}
		w := q[i:j]
		i = j
		t := term{text: w, neg: neg, off: start}
		if strings.HasSuffix(w, "*") {
			t.prefix = true
			t.text = strings.TrimRight(w, "*")
			if t.text == "" {
				return nil, qerr(q, start, "a lone '*' (write word* for the words that start with word)")
			}
		}
		toks = append(toks, t)
	}
	if len(toks) > MaxQueryTerms {
		return nil, qerr(q, -1, "%d terms, more than the %d a query may hold", len(toks), MaxQueryTerms)
	}
	// NOT and OR, then groups.
	var cur []term
	for k := 0; k < len(toks); k++ {
		t := toks[k]
		if !t.phrase && !t.neg && t.text == "NOT" && !t.prefix {
			if k+1 >= len(toks) || isOp(toks[k+1]) {
				return nil, qerr(q, t.off, "NOT must be followed by the word or phrase to exclude")
			}
			k++
			n := toks[k]
			n.neg = true
			p.not = append(p.not, n)
			continue
		}
		if !t.phrase && !t.neg && t.text == "OR" && !t.prefix {
			if cur == nil || k+1 >= len(toks) || isOp(toks[k+1]) || toks[k+1].neg {
				return nil, qerr(q, t.off, "OR must stand between two words or phrases")
			}
			k++
			p.groups[len(p.groups)-1] = append(p.groups[len(p.groups)-1], toks[k])
			continue
		}
		if t.neg {
			p.not = append(p.not, t)
			cur = nil
			continue
		}
		cur = []term{t}
		p.groups = append(p.groups, cur)
	}
	if len(p.groups) == 0 {
		if len(p.not) > 0 {
			return nil, qerr(q, -1, "only excluded terms: a query needs a word or phrase to find")
		}
		return nil, qerr(q, -1, "no word or phrase to search for")
	}
	all := append([]term{}, p.not...)
	for _, g := range p.groups {
		all = append(all, g...)
	}
	for _, t := range all {
		if !hasWord(t.text) {
			return nil, qerr(q, t.off, "%q holds no letter or digit to search for", t.text)
		}
		for _, r := range t.text {
			if isCJK(r) {
				p.substring = true
			}
		}
	}
	if p.substring {
		for _, t := range all {
			if utf8.RuneCountInString(strings.TrimSpace(t.text)) < 3 {
				return nil, qerr(q, t.off, "%q: a substring (or CJK) term needs at least 3 characters", t.text)
			}
		}
	}
	return p, nil
}

func isOp(t term) bool {
	return !t.phrase && !t.neg && !t.prefix && (t.text == "OR" || t.text == "NOT")
}

func hasWord(s string) bool {
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			return true
		}
	}
	return false
}

// quote is s as an FTS5 string.
func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// match is the FTS5 MATCH expression of p.
func (p *parsed) match() string {
	one := func(t term) string {
		s := quote(t.text)
		if t.prefix && !p.substring {
			s += " *"
		}
		return s
	}
	var b strings.Builder
	for k, g := range p.groups {
		if k > 0 {
			b.WriteString(" AND ")
		}
		b.WriteByte('(')
		for j, t := range g {
			if j > 0 {
				b.WriteString(" OR ")
			}
			b.WriteString(one(t))
		}
		b.WriteByte(')')
	}
	for _, t := range p.not {
		b.WriteString(" NOT ")
		b.WriteString(one(t))
	}
	return b.String()
}
