package launch

import (
	"os/exec"
	"strings"
	"testing"
)

var nastyWords = []string{
	"", "plain", "a b", "it's", "'", "''", `\`, `a\'b`, `"dq"`, "$HOME", "${X:-y}", "`id`", "$(id)",
	"a;b", "a&&b", "a|b", "*", "?", "[a]", "~", "~user", "#c", "!x", "tab\there", "new\nline",
	"-n", "--", "=", "A=1", "%s", "é ü 日本", "\x01ctl", " lead", "trail ",
}

func TestQuote(t *testing.T) {
	tests := map[string]string{
		"":         "''",
		"abc":      "abc",
		"/a/b.c-d": "/a/b.c-d",
		"A=1,b:c":  "A=1,b:c",
		"a b":      "'a b'",
		"it's":     `'it'\''s'`,
		"$x":       "'$x'",
		"~":        "'~'",
	}
	for in, want := range tests {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestQuoteRoundTripSh checks with a real shell that every quoted word is
// read back as exactly one word equal to the original.
func TestQuoteRoundTripSh(t *testing.T) {
	script := `for a in "$@"; do printf '%s\0' "$a"; done`
	cmdline := "set -- " + QuoteAll(nastyWords) + "; " + script
	out, err := exec.Command("sh", "-c", cmdline).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(got) != len(nastyWords) {
		t.Fatalf("sh read %d words, want %d: %q", len(got), len(nastyWords), got)
	}
	for i := range got {
		if got[i] != nastyWords[i] {
			t.Errorf("word %d: sh read %q, want %q (quoted %s)", i, got[i], nastyWords[i], Quote(nastyWords[i]))
		}
	}
}

// unquote is a reader for the subset of POSIX quoting Quote produces.
func unquote(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch s[i] {
		case '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return "", false
			}
			b.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case '\\':
			if i+1 >= len(s) {
				return "", false
			}
			b.WriteByte(s[i+1])
			i += 2
		default:
			if !isShellSafe(s[i : i+1]) {
				return "", false
			}
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), true
}

func FuzzQuote(f *testing.F) {
	for _, w := range nastyWords {
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		got, ok := unquote(q)
		if !ok || got != s {
			t.Fatalf("Quote(%q) = %s reads back as %q (ok=%v)", s, q, got, ok)
		}
	})
}
