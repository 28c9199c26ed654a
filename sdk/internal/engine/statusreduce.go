package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// statusTreeMin is the set size from which a round's status exchange is a
// reduction along a tree (backends.StatusReducer: ⌈log2 n⌉ messages a
// member) instead of every vector to every member (n−1): below it the one
// direct hop is as fast or faster (docs/performance.md, "Scale": the
// simulator puts the crossing between 16 and 64 ranks with 15 µs links;
// with slow links and few hosts the direct exchange wins). Every member of
// a set takes the same path (the size is the same everywhere). A variable
// only so that tests can lower it.
var statusTreeMin = 64

// reduceStatus combines every member's status vector through rd: the
// combination decideSummary needs, with set rank 0's settings words (the
// tree folds the group holding rank 0 first, and CombineStatus keeps the
// first vector's).
func (e *Engine) reduceStatus(rd backends.StatusReducer, status []uint64, W int) ([]uint64, error) {
	extra := len(status) - (1 + 2*W)
	combine := func(lo, hi []byte) []byte {
		sum := NewStatusSummary(W, extra)
		sum = CombineStatus(sum, wordsOf(lo), W)
		sum = CombineStatus(sum, wordsOf(hi), W)
		return words(sum)
	}
	b, err := rd.ReduceStatus(words(status), combine)
	if err != nil {
		return nil, err
	}
	if len(b) != 8*len(status) {
		return nil, fmt.Errorf("hvd: engine: status reduction returned %d bytes, want %d", len(b), 8*len(status))
	}
	return wordsOf(b), nil
}

func wordsOf(b []byte) []uint64 { return wordsInto(make([]uint64, len(b)/8), b) }

// wordsInto decodes b's little-endian words into v (len(b)/8 of them) and
// returns v.
func wordsInto(v []uint64, b []byte) []uint64 {
	for i := range v {
		v[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return v
}
