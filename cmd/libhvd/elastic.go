package main

// Elastic workers and process set specs through the C ABI: callable specs
// (Python's hvd.ProcessSet(callable)) are evaluated by a C function the
// caller installs with set_spec_evaluator, so that the SDK's registry
// (sdk/setspecs.go) re-evaluates them after every elastic reset.

/*
#include <stdint.h>

typedef int32_t (*hvd_spec_evaluator)(int64_t token, int32_t size, int32_t *ranks, int32_t cap);

static int32_t hvd_call_evaluator(void *f, int64_t token, int32_t size, int32_t *ranks, int32_t cap) {
	return ((hvd_spec_evaluator)f)(token, size, ranks, cap);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/hvdorg/hvd/sdk"
)

var evaluator struct {
	sync.Mutex
	fn unsafe.Pointer
}

func implSetSpecEvaluator(fn unsafe.Pointer) (int32, error) {
	if fn == nil {
		return 0, fmt.Errorf("%w: set_spec_evaluator: null function", sdk.ErrInvalidArgument)
	}
	evaluator.Lock()
	evaluator.fn = fn
	evaluator.Unlock()
	return 0, nil
}

// specOf is the spec of a callable: its ranks come from the evaluator. A
// failing callable panics (the SDK turns the panic into Init's error).
func specOf(token int64) (sdk.SetSpec, error) {
	evaluator.Lock()
	fn := evaluator.fn
	evaluator.Unlock()
	if fn == nil {
		return sdk.SetSpec{}, fmt.Errorf("%w: a process set is given by a callable (token %d) but no evaluator is installed (set_spec_evaluator)", sdk.ErrInvalidArgument, token)
	}
	name := fmt.Sprintf("callable #%d", token)
	return sdk.SetSpec{Name: name, Func: func(size int) []int {
		buf := make([]int32, 64)
		for {
			n := int(C.hvd_call_evaluator(fn, C.int64_t(token), C.int32_t(size), (*C.int32_t)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf))))
			if n < 0 {
				panic("it raised an exception (see the Python exception)")
			}
			if n <= len(buf) {
				out := make([]int, n)
				for i := range out {
					out[i] = int(buf[i])
				}
				return out
			}
			buf = make([]int32, n)
		}
	}}, nil
}

// initSpecs turns init's flattened static sets into specs, in order.
func initSpecs(flat, sizes []int32, tokens []int64) ([]sdk.SetSpec, error) {
	if len(tokens) != 0 && len(tokens) != len(sizes) {
		return nil, fmt.Errorf("%w: init: %d set tokens for %d sets", sdk.ErrInvalidArgument, len(tokens), len(sizes))
	}
	var specs []sdk.SetSpec
	off := 0
	for i, n := range sizes {
		if n < 0 || off+int(n) > len(flat) {
			return nil, fmt.Errorf("%w: init: process set #%d: size %d does not fit the %d ranks given", sdk.ErrInvalidArgument, i+1, n, len(flat))
		}
		if len(tokens) > 0 && tokens[i] != 0 {
			if n != 0 {
				return nil, fmt.Errorf("%w: init: process set #%d is a callable and has %d ranks given", sdk.ErrInvalidArgument, i+1, n)
			}
			spec, err := specOf(tokens[i])
			if err != nil {
				return nil, err
			}
			specs = append(specs, spec)
			continue
		}
		s := make([]int, n)
		for j := range s {
			s[j] = int(flat[off+j])
		}
		specs = append(specs, sdk.SetSpec{Ranks: s})
		off += int(n)
	}
	if off != len(flat) {
		return nil, fmt.Errorf("%w: init: %d ranks given but the set sizes add up to %d", sdk.ErrInvalidArgument, len(flat), off)
	}
	return specs, nil
}

func implAddProcessSetSpec(token int64) (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	spec, err := specOf(token)
	if err != nil {
		return 0, err
	}
	ps, err := w.AddProcessSetSpec(spec)
	if err != nil {
		return 0, err
	}
	return int32(ps.ID()), nil
}

func implStaticProcessSetId(index int32) (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	return int32(w.StaticProcessSetID(int(index))), nil
}

func implElasticEpoch() int32 {
	return query(func(w *sdk.World) int { return w.Identity().Epoch })
}

func implElasticCheckHostUpdates() (int32, error) {
	wk := sdk.ElasticWorker()
	if wk == nil {
		if _, err := sdk.Current(); err != nil {
			return 0, err
		}
		return 0, nil
	}
	err := wk.CheckHostUpdates()
	var hu *sdk.HostsUpdatedError
	if errors.As(err, &hu) {
		if hu.Flags <= 0 || hu.Flags > 3 {
			return 3, nil // unknown flags: sync, as for a mixed update
		}
		return int32(hu.Flags), nil
	}
	return 0, err
}

func implElasticWantSync(skip bool) (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	want, err := sdk.AgreeSync(w, skip)
	return b2i(want), err
}
