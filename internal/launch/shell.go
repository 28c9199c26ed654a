package launch

import "strings"

// Quote returns s quoted for a POSIX shell so that the shell reads it back as
// exactly one word equal to s. Words made only of characters that are never
// special ([A-Za-z0-9_@%+=:,./-]) are returned as they are; everything else
// is wrapped in single quotes, with each embedded single quote closed,
// escaped and reopened. For example:
//
//	Quote("a b")  == `'a b'`
//	Quote("it's") == `'it'\''s'`
//	Quote("")     == `''`
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if isShellSafe(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// QuoteAll quotes every word with Quote and joins them with spaces.
func QuoteAll(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}

func isShellSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("_@%+=:,./-", c) >= 0:
		default:
			return false
		}
	}
	return true
}
