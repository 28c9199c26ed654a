// Command libhvd is hvd's C ABI, built as a shared library for the Python
// package (and any other C caller):
//
//	go build -buildmode=c-shared -o build/python/hvd/libhvd.so ./cmd/libhvd
//
// abi_gen.go (generated from codegen/abi/hvd.go, do not edit) holds the
// //export functions; this file implements them on top of package sdk.
//
// Memory rules (cgo's pointer-passing rules hold by construction):
//   - tensors are caller memory (void*): the engine reads and writes them in
//     place, and the caller keeps them alive until wait() returns;
//   - nothing Go allocates is ever handed to C: handles are integer ids into
//     a table here, outputs the engine allocated (allgather, alltoall,
//     reducescatter) are copied into caller memory by handle_output_copy;
//   - slices passed in (shapes, splits, pointer arrays) are copied before the
//     call returns.
//
// Only one Go runtime can live in a process: do not load libhvd.so next to
// another Go shared library (the Python loader refuses to).
package main

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/hvdorg/hvd/sdk"
)

func main() {}

var errUnknownHandle = errors.New("hvd: unknown handle")

// handles maps the ids given to C to in-flight (or completed, unreleased)
// operations.
var handles = struct {
	sync.Mutex
	next int64
	m    map[int64]*sdk.Handle
}{m: map[int64]*sdk.Handle{}}

func addHandle(h *sdk.Handle, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	handles.Lock()
	defer handles.Unlock()
	handles.next++
	handles.m[handles.next] = h
	return handles.next, nil
}

func getHandle(id int64) (*sdk.Handle, error) {
	handles.Lock()
	defer handles.Unlock()
	h, ok := handles.m[id]
	if !ok {
		return nil, fmt.Errorf("%w %d (never issued, or already released)", errUnknownHandle, id)
	}
	return h, nil
}

func implAbiVersion() int64 { return specVersion }

func implInit(flat, sizes []int32, tokens []int64, dynamic bool) (int32, error) {
	syncEnviron() // settings are read from the environment as it is now
	specs, err := initSpecs(flat, sizes, tokens)
	if err != nil {
		return 0, err
	}
	if err := sdk.Init(sdk.Config{SetSpecs: specs, Dynamic: dynamic}); err != nil {
		return 0, err
	}
	setProcs()
	return 0, nil
}

func implShutdown() (int32, error) {
	handles.Lock()
	handles.m = map[int64]*sdk.Handle{}
	handles.Unlock()
	return 0, sdk.Shutdown()
}

func implIsInitialized() int32 { return b2i(sdk.IsInitialized()) }

func implBackendBuilt(name string) int32 { return b2i(sdk.BackendBuilt(name)) }

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// query answers -1 before init, as Horovod's C API does.
func query(f func(w *sdk.World) int) int32 {
	w, err := sdk.Current()
	if err != nil {
		return -1
	}
	return int32(f(w))
}

func implRank() int32      { return query((*sdk.World).Rank) }
func implSize() int32      { return query((*sdk.World).Size) }
func implLocalRank() int32 { return query((*sdk.World).LocalRank) }
func implLocalSize() int32 { return query((*sdk.World).LocalSize) }
func implCrossRank() int32 { return query((*sdk.World).CrossRank) }
func implCrossSize() int32 { return query((*sdk.World).CrossSize) }
func implIsHomogeneous() int32 {
	return query(func(w *sdk.World) int { return int(b2i(w.IsHomogeneous())) })
}

func fill(out []int32, vals []int) int32 {
	for i := range min(len(out), len(vals)) {
		out[i] = int32(vals[i])
	}
	return int32(len(vals))
}

func implProcessSetIds(out []int32) (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	var ids []int
	for _, ps := range w.ProcessSets() {
		ids = append(ids, ps.ID())
	}
	return fill(out, ids), nil
}

func processSet(id int32) (*sdk.World, *sdk.ProcessSet, error) {
	w, err := sdk.Current()
	if err != nil {
		return nil, nil, err
	}
	ps, err := w.ProcessSet(int(id))
	return w, ps, err
}

func implProcessSetRanks(id int32, out []int32) (int32, error) {
	_, ps, err := processSet(id)
	if err != nil {
		return 0, err
	}
	return fill(out, ps.Ranks()), nil
}

func implAddProcessSet(ranks []int32) (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	rs := make([]int, len(ranks))
	for i, r := range ranks {
		rs[i] = int(r)
	}
	ps, err := w.AddProcessSet(rs)
	if err != nil {
		return 0, err
	}
	return int32(ps.ID()), nil
}

func implRemoveProcessSet(id int32) (int32, error) {
	w, ps, err := processSet(id)
	if err != nil {
		return 0, err
	}
	return 0, w.RemoveProcessSet(ps)
}

// tensorAt views caller memory as a tensor (no copy).
func tensorAt(p unsafe.Pointer, dtype int32, shape []int64) (sdk.Tensor, error) {
	dt := sdk.DType(dtype)
	if dtype < 0 || !dt.Valid() {
		return sdk.Tensor{}, fmt.Errorf("%w: unknown dtype %d", sdk.ErrInvalidArgument, dtype)
	}
	n := int64(1)
	for i, d := range shape {
		if d < 0 {
			return sdk.Tensor{}, fmt.Errorf("%w: dimension %d is negative (%d)", sdk.ErrInvalidArgument, i, d)
		}
		n *= d
	}
	nbytes := n * int64(dt.Size())
	t := sdk.Tensor{DType: dt, Shape: shape}
	if nbytes > 0 {
		if p == nil {
			return sdk.Tensor{}, fmt.Errorf("%w: null data pointer for a tensor of %d bytes", sdk.ErrInvalidArgument, nbytes)
		}
		t.Data = unsafe.Slice((*byte)(p), nbytes)
	}
	return t, nil
}

// tensorsAt views several tensors given as pointer, dtype, ndims and the
// concatenated shapes.
func tensorsAt(ptrs []unsafe.Pointer, dtypes, ndims []int32, shapes []int64) ([]sdk.Tensor, error) {
	if len(dtypes) != len(ptrs) || len(ndims) != len(ptrs) {
		return nil, fmt.Errorf("%w: %d tensors, %d dtypes, %d ranks", sdk.ErrInvalidArgument, len(ptrs), len(dtypes), len(ndims))
	}
	ts := make([]sdk.Tensor, len(ptrs))
	off := 0
	for i := range ptrs {
		nd := int(ndims[i])
		if nd < 0 || off+nd > len(shapes) {
			return nil, fmt.Errorf("%w: tensor %d: %d dimensions do not fit the %d shape values given", sdk.ErrInvalidArgument, i, nd, len(shapes))
		}
		t, err := tensorAt(ptrs[i], dtypes[i], append([]int64(nil), shapes[off:off+nd]...))
		if err != nil {
			return nil, fmt.Errorf("tensor %d: %w", i, err)
		}
		ts[i] = t
		off += nd
	}
	return ts, nil
}

func reduceOpts(op int32, pre, post float64, name string, prio int32) sdk.ReduceOptions {
	return sdk.ReduceOptions{Op: sdk.ReduceOp(op), Prescale: pre, Postscale: post, Name: name, Priority: int(prio)}
}

func implAllreduceAsync(in, out unsafe.Pointer, dtype int32, shape []int64, op int32, pre, post float64, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	t, err := tensorAt(in, dtype, shape)
	if err != nil {
		return 0, err
	}
	o, err := tensorAt(out, dtype, shape)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.AllreduceIntoAsync(t, o, reduceOpts(op, pre, post, name, prio)))
}

func implAllreduce(in, out unsafe.Pointer, dtype int32, shape []int64, op int32, pre, post float64, set int32, name string, prio int32) (int32, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	t, err := tensorAt(in, dtype, shape)
	if err != nil {
		return 0, err
	}
	o, err := tensorAt(out, dtype, shape)
	if err != nil {
		return 0, err
	}
	return 0, ps.AllreduceIntoDriving(t, o, reduceOpts(op, pre, post, name, prio))
}

// setInsOuts resolves a set and views several inputs and their outputs
// (same dtypes and shapes).
func setInsOuts(set int32, ins, outs []unsafe.Pointer, dtypes, ndims []int32, shapes []int64) (*sdk.ProcessSet, []sdk.Tensor, []sdk.Tensor, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return nil, nil, nil, err
	}
	ts, err := tensorsAt(ins, dtypes, ndims, shapes)
	if err != nil {
		return nil, nil, nil, err
	}
	os, err := tensorsAt(outs, dtypes, ndims, shapes)
	if err != nil {
		return nil, nil, nil, err
	}
	return ps, ts, os, nil
}

func implGroupedAllreduceAsync(ins, outs []unsafe.Pointer, dtypes, ndims []int32, shapes []int64, op int32, pre, post float64, set int32, name string, prio int32) (int64, error) {
	ps, ts, os, err := setInsOuts(set, ins, outs, dtypes, ndims, shapes)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.GroupedAllreduceIntoAsync(ts, os, reduceOpts(op, pre, post, name, prio)))
}

func implAllgatherAsync(in unsafe.Pointer, dtype int32, shape []int64, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	t, err := tensorAt(in, dtype, shape)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.AllgatherAsync(t, name, sdk.Priority(prio)))
}

func implGroupedAllgatherAsync(ins []unsafe.Pointer, dtypes, ndims []int32, shapes []int64, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	ts, err := tensorsAt(ins, dtypes, ndims, shapes)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.GroupedAllgatherAsync(ts, name, sdk.Priority(prio)))
}

func implBroadcastAsync(in unsafe.Pointer, dtype int32, shape []int64, root, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	t, err := tensorAt(in, dtype, shape)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.BroadcastAsync(t, int(root), name, sdk.Priority(prio)))
}

func implSendAsync(in unsafe.Pointer, dtype int32, shape []int64, dst int32, tag int64, set int32) (int64, error) {
	return p2pAsync("send", in, dtype, shape, dst, tag, set)
}

func implRecvAsync(in unsafe.Pointer, dtype int32, shape []int64, src int32, tag int64, set int32) (int64, error) {
	return p2pAsync("recv", in, dtype, shape, src, tag, set)
}

func implSend(in unsafe.Pointer, dtype int32, shape []int64, dst int32, tag int64, set int32) (int32, error) {
	ps, t, err := p2pArgs("send", in, dtype, shape, tag, set)
	if err != nil {
		return 0, err
	}
	return 0, ps.Send(t, int(dst), uint32(tag))
}

func implRecv(in unsafe.Pointer, dtype int32, shape []int64, src int32, tag int64, set int32) (int32, error) {
	ps, t, err := p2pArgs("recv", in, dtype, shape, tag, set)
	if err != nil {
		return 0, err
	}
	return 0, ps.Recv(t, int(src), uint32(tag))
}

func p2pArgs(op string, in unsafe.Pointer, dtype int32, shape []int64, tag int64, set int32) (*sdk.ProcessSet, sdk.Tensor, error) {
	if tag < 0 || tag > math.MaxUint32 {
		return nil, sdk.Tensor{}, fmt.Errorf("%w: %s: tag %d is outside 0 .. 2^32-1", sdk.ErrInvalidArgument, op, tag)
	}
	_, ps, err := processSet(set)
	if err != nil {
		return nil, sdk.Tensor{}, err
	}
	t, err := tensorAt(in, dtype, shape)
	return ps, t, err
}

func p2pAsync(op string, in unsafe.Pointer, dtype int32, shape []int64, peer int32, tag int64, set int32) (int64, error) {
	ps, t, err := p2pArgs(op, in, dtype, shape, tag, set)
	if err != nil {
		return 0, err
	}
	if op == "send" {
		return addHandle(ps.SendAsync(t, int(peer), uint32(tag)))
	}
	return addHandle(ps.RecvAsync(t, int(peer), uint32(tag)))
}

func implAlltoallAsync(in unsafe.Pointer, dtype int32, shape []int64, splits []int32, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	t, err := tensorAt(in, dtype, shape)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.AlltoallAsync(t, splits, name, sdk.Priority(prio)))
}

func implReducescatterAsync(in unsafe.Pointer, dtype int32, shape []int64, op int32, pre, post float64, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	t, err := tensorAt(in, dtype, shape)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.ReducescatterAsync(t, reduceOpts(op, pre, post, name, prio)))
}

func implGroupedReducescatterAsync(ins []unsafe.Pointer, dtypes, ndims []int32, shapes []int64, op int32, pre, post float64, set int32, name string, prio int32) (int64, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	ts, err := tensorsAt(ins, dtypes, ndims, shapes)
	if err != nil {
		return 0, err
	}
	return addHandle(ps.GroupedReducescatterAsync(ts, reduceOpts(op, pre, post, name, prio)))
}

func implBarrier(set int32) (int32, error) {
	_, ps, err := processSet(set)
	if err != nil {
		return 0, err
	}
	return 0, ps.Barrier()
}

func implJoin() (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	last, err := w.Join()
	return int32(last), err
}

func implPoll(id int64) (int32, error) {
	h, err := getHandle(id)
	if err != nil {
		return 0, err
	}
	return b2i(h.Poll()), nil
}

func implWait(id int64) (int32, error) {
	h, err := getHandle(id)
	if err != nil {
		return 0, err
	}
	// Not WaitDriving: after a burst of async ops the engine goroutine
	// runs their rounds as they arrive, and a waiter taking rounds over
	// from it costs a wake-up per round (measured: twice the context
	// switches for 200 × 4 KiB). Nor WaitFromC: a batch's waits, sleeping
	// in the kernel one after another as its rounds complete, cost 1.5-2×
	// the context switches of parking (measured at np 2); the synchronous
	// allreduce sleeps in the kernel instead (sdk.AllreduceIntoDriving).
	_, err = h.Wait()
	return 0, err
}

// output returns output i of a completed op.
func output(id int64, i int32) (sdk.Tensor, error) {
	h, err := getHandle(id)
	if err != nil {
		return sdk.Tensor{}, err
	}
	if !h.Poll() {
		return sdk.Tensor{}, fmt.Errorf("%w: handle %d has not completed: wait first", sdk.ErrInvalidArgument, id)
	}
	if _, err := h.Wait(); err != nil {
		return sdk.Tensor{}, err
	}
	outs := h.Outputs()
	if i < 0 || int(i) >= len(outs) {
		return sdk.Tensor{}, fmt.Errorf("%w: handle %d has %d outputs, not %d", sdk.ErrInvalidArgument, id, len(outs), i+1)
	}
	return outs[i], nil
}

func implHandleNumOutputs(id int64) (int32, error) {
	h, err := getHandle(id)
	if err != nil {
		return 0, err
	}
	if _, err := h.Wait(); err != nil {
		return 0, err
	}
	return int32(len(h.Outputs())), nil
}

func implHandleOutputShape(id int64, i int32, shape []int64) (int32, error) {
	t, err := output(id, i)
	if err != nil {
		return 0, err
	}
	copy(shape, t.Shape)
	return int32(len(t.Shape)), nil
}

func implHandleOutputCopy(id int64, i int32, dst unsafe.Pointer, nbytes int64) (int32, error) {
	t, err := output(id, i)
	if err != nil {
		return 0, err
	}
	if int64(len(t.Data)) != nbytes {
		return 0, fmt.Errorf("%w: output %d of handle %d has %d bytes, the destination %d", sdk.ErrInvalidArgument, i, id, len(t.Data), nbytes)
	}
	if nbytes > 0 {
		if dst == nil {
			return 0, fmt.Errorf("%w: null destination", sdk.ErrInvalidArgument)
		}
		copy(unsafe.Slice((*byte)(dst), nbytes), t.Data)
	}
	return 0, nil
}

func implHandleReceivedSplits(id int64, out []int32) (int32, error) {
	if _, err := output(id, 0); err != nil {
		return 0, err
	}
	h, _ := getHandle(id)
	rs := h.ReceivedSplits()
	copy(out, rs)
	return int32(len(rs)), nil
}

func implRelease(id int64) (int32, error) {
	handles.Lock()
	defer handles.Unlock()
	if _, ok := handles.m[id]; !ok {
		return 0, fmt.Errorf("%w %d", errUnknownHandle, id)
	}
	delete(handles.m, id)
	return 0, nil
}

func implStartTimeline(path string, markCycles bool) (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	return 0, w.StartTimeline(path, markCycles)
}

func implStopTimeline() (int32, error) {
	w, err := sdk.Current()
	if err != nil {
		return 0, err
	}
	return 0, w.StopTimeline()
}

func implAllreduceManyAsync(ins, outs []unsafe.Pointer, dtypes, ndims []int32, shapes []int64, op int32, pre, post float64, set int32, names string, nameLens []int32, prios []int32, drive bool) (int64, error) {
	ps, ts, os, err := setInsOuts(set, ins, outs, dtypes, ndims, shapes)
	if err != nil {
		return 0, err
	}
	if len(nameLens) != len(ts) || len(prios) != len(ts) {
		return 0, fmt.Errorf("%w: %d tensors, %d name lengths, %d priorities", sdk.ErrInvalidArgument, len(ts), len(nameLens), len(prios))
	}
	if len(ts) == 0 {
		return 0, fmt.Errorf("%w: allreduce_many_async: no tensors", sdk.ErrInvalidArgument)
	}
	ns := make([]string, len(ts))
	ps32 := make([]int, len(ts))
	off := 0
	for i, l := range nameLens {
		if l < 0 || off+int(l) > len(names) {
			return 0, fmt.Errorf("%w: name %d: %d bytes do not fit the %d bytes of names given", sdk.ErrInvalidArgument, i, l, len(names))
		}
		ns[i] = names[off : off+int(l)]
		off += int(l)
		ps32[i] = int(prios[i])
	}
	if off != len(names) {
		return 0, fmt.Errorf("%w: the name lengths add up to %d bytes, the names given are %d", sdk.ErrInvalidArgument, off, len(names))
	}
	hs, err := ps.AllreduceManyIntoAsync(ts, os, ns, ps32, reduceOpts(op, pre, post, "", 0), drive)
	if err != nil {
		return 0, err
	}
	// n consecutive ids, the first returned.
	handles.Lock()
	defer handles.Unlock()
	first := handles.next + 1
	for _, h := range hs {
		handles.next++
		handles.m[handles.next] = h
	}
	return first, nil
}

func implWaitMany(ids []int64, drive bool) (int32, error) {
	hs := make([]*sdk.Handle, len(ids))
	for i, id := range ids {
		h, err := getHandle(id)
		if err != nil {
			return 0, err
		}
		hs[i] = h
	}
	return 0, sdk.WaitMany(hs, drive)
}

// implWaitReap: after the op id completes successfully, id and the
// candidates already completed successfully leave the table together, so
// that a batch of in-place ops is synchronized with one call instead of a
// wait and a release per op. Each reaped op's handle is waited for (it has
// completed, so this only runs its finishing step) before it is forgotten.
// The scan stops at the first candidate still in flight, so a batch
// synchronized op by op costs O(ops) in all, not O(ops²).
func implWaitReap(id int64, cands, reaped []int64) (int32, error) {
	h, err := getHandle(id)
	if err != nil {
		return 0, err
	}
	if _, err := h.Wait(); err != nil {
		return 0, err
	}
	handles.Lock()
	defer handles.Unlock()
	n := 0
	if _, ok := handles.m[id]; ok && len(reaped) > 0 {
		delete(handles.m, id)
		reaped[0] = id
		n = 1
	}
	for _, c := range cands {
		if n >= len(reaped) {
			break
		}
		hc, ok := handles.m[c]
		if !ok {
			continue
		}
		if !hc.Poll() {
			break // ops complete about in the order issued: the rest are in flight too
		}
		if _, err := hc.Wait(); err != nil {
			continue // its synchronize raises the error
		}
		delete(handles.m, c)
		reaped[n] = c
		n++
	}
	return int32(n), nil
}

func implReleaseMany(ids []int64) (int32, error) {
	handles.Lock()
	defer handles.Unlock()
	var missing []int64
	for _, id := range ids {
		if _, ok := handles.m[id]; !ok {
			missing = append(missing, id)
			continue
		}
		delete(handles.m, id)
	}
	if len(missing) > 0 {
		return 0, fmt.Errorf("%w %v", errUnknownHandle, missing)
	}
	return 0, nil
}
