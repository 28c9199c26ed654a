package main

import (
	"fmt"
	"io"
	"strings"
)

// lineDiff writes a unified-style diff of old → new (whole-file hunks with
// 2 lines of context, "-"/"+" lines), as `hvdgen generate --dry-run`
// shows it. Line-based LCS: generated files are small.
func lineDiff(w io.Writer, name string, old, new []byte) {
	a := splitLines(string(old))
	b := splitLines(string(new))
	// lcs[i][j]: length of the LCS of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type op struct {
		kind byte
		text string
	}
	var ops []op
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', a[i]})
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	fmt.Fprintf(w, "--- %s\n+++ %s (generated)\n", name, name)
	const ctx = 2
	for k, o := range ops {
		if o.kind == ' ' {
			near := false
			for d := -ctx; d <= ctx; d++ {
				if k+d >= 0 && k+d < len(ops) && ops[k+d].kind != ' ' {
					near = true
				}
			}
			if !near {
				continue
			}
		}
		fmt.Fprintf(w, "%c%s\n", o.kind, o.text)
	}
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}
