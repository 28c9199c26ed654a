package launch

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"sync"
)

// maxLine bounds how much of one line is held in memory; a longer line is
// emitted in pieces of this size, each with its own prefix and newline.
const maxLine = 1 << 20

// lockedWriter makes each Write to w atomic with respect to the others, so
// that lines of different ranks never interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.Write([]byte(fmt.Sprintf(format, args...))) //nolint:errcheck // best effort to the console
}

// StreamPrefix is the prefix horovodrun puts before every line of a rank's
// output: "[<rank>]<stdout>:" or "[<rank>]<stderr>:" (no space follows, as
// in horovodrun's safe_shell_exec).
func StreamPrefix(rank int, stream string) string {
	return "[" + strconv.Itoa(rank) + "]<" + stream + ">:"
}

// pumpLines reads r until EOF or error and writes every line to dst as
// prefix+line+"\n" in a single Write; a last line without a newline is
// completed with one. If raw is not nil, the bytes read are also written to
// it unchanged. Write errors are ignored: a closed console must not stop the
// job, and the worker keeps draining its pipe.
func pumpLines(r io.Reader, dst io.Writer, prefix string, raw io.Writer) {
	br := bufio.NewReaderSize(r, 64<<10)
	line := []byte(prefix)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 && raw != nil {
			raw.Write(chunk) //nolint:errcheck // see above
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			dst.Write(line) //nolint:errcheck
			line = line[:len(prefix)]
		case err == bufio.ErrBufferFull:
			if len(line)-len(prefix) >= maxLine {
				dst.Write(append(line, '\n')) //nolint:errcheck
				line = line[:len(prefix)]
			}
		default: // EOF, or the pipe was closed under us
			if len(line) > len(prefix) {
				dst.Write(append(line, '\n')) //nolint:errcheck
			}
			return
		}
	}
}

// RankDirName is the per-rank folder --output-filename creates:
// "rank.<rank>", zero-padded to the width of size-1 as in horovodrun.
func RankDirName(rank, size int) string {
	width := len(strconv.Itoa(max(size-1, 0)))
	return fmt.Sprintf("rank.%0*d", width, rank)
}
