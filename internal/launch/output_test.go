package launch

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
)

func TestPumpLines(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"a\n", "[0]<stdout>:a\n"},
		{"a\nb\n", "[0]<stdout>:a\n[0]<stdout>:b\n"},
		{"a\n\nlast", "[0]<stdout>:a\n[0]<stdout>:\n[0]<stdout>:last\n"},
		{"no newline", "[0]<stdout>:no newline\n"},
	}
	for _, tt := range tests {
		var out, raw bytes.Buffer
		// One byte at a time: lines must still come out whole.
		pumpLines(iotest.OneByteReader(strings.NewReader(tt.in)), &out, StreamPrefix(0, "stdout"), &raw)
		if out.String() != tt.want {
			t.Errorf("pumpLines(%q) = %q, want %q", tt.in, out.String(), tt.want)
		}
		if raw.String() != tt.in {
			t.Errorf("raw copy of %q = %q", tt.in, raw.String())
		}
	}
}

func TestPumpLinesLongLine(t *testing.T) {
	in := strings.Repeat("x", 3*maxLine+10) + "\nend\n"
	var out bytes.Buffer
	pumpLines(strings.NewReader(in), &out, "[1]<stderr>:", nil)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 5 || lines[4] != "[1]<stderr>:end" {
		t.Fatalf("got %d lines, last %q", len(lines), lines[len(lines)-1])
	}
	total := 0
	for _, l := range lines[:4] {
		if !strings.HasPrefix(l, "[1]<stderr>:") || len(l)-len("[1]<stderr>:") > maxLine+64<<10 {
			t.Fatalf("bad piece of length %d", len(l))
		}
		total += len(l) - len("[1]<stderr>:")
	}
	if total != 3*maxLine+10 {
		t.Errorf("pieces hold %d bytes, want %d", total, 3*maxLine+10)
	}
}

// TestPumpLinesNoInterleaving runs several pumps into one lockedWriter and
// checks that every output line is one whole input line.
func TestPumpLinesNoInterleaving(t *testing.T) {
	var out bytes.Buffer
	lw := &lockedWriter{w: &out}
	var wg sync.WaitGroup
	for r := range 4 {
		pr, pw := io.Pipe()
		wg.Add(2)
		go func() {
			defer wg.Done()
			pumpLines(pr, lw, StreamPrefix(r, "stdout"), nil)
		}()
		go func() {
			defer wg.Done()
			line := strings.Repeat(string(rune('a'+r)), 5000) + "\n"
			for range 100 {
				// Write in two halves to tempt interleaving.
				pw.Write([]byte(line[:2500]))
				pw.Write([]byte(line[2500:]))
			}
			pw.Close()
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		r := int(l[1] - '0')
		if l != StreamPrefix(r, "stdout")+strings.Repeat(string(rune('a'+r)), 5000) {
			t.Fatalf("mangled line %.40q…", l)
		}
	}
}

func TestRankDirName(t *testing.T) {
	tests := []struct {
		rank, size int
		want       string
	}{
		{0, 1, "rank.0"}, {3, 4, "rank.3"}, {9, 10, "rank.9"}, {0, 11, "rank.00"}, {10, 11, "rank.10"},
		{7, 101, "rank.007"}, {99, 100, "rank.99"},
	}
	for _, tt := range tests {
		if got := RankDirName(tt.rank, tt.size); got != tt.want {
			t.Errorf("RankDirName(%d, %d) = %s, want %s", tt.rank, tt.size, got, tt.want)
		}
	}
}
