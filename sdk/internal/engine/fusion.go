package engine

// Fuse merges compatible allreduce responses into one, and compatible
// allgather responses into one, as Horovod's FuseResponses does: walking the
// list in order, an allreduce absorbs later allreduces with the same dtype,
// reduction and scale factors (an allgather, later allgathers of the same
// dtype) while the fused size stays within threshold bytes; an incompatible response in
// between is skipped (look-ahead) as long as the fused size plus the skipped
// sizes stay within the threshold, and keeps its place. Other response types
// are never fused. threshold <= 0 disables fusion. The result preserves the
// relative order of everything that was not merged.
func Fuse(resps []Response, threshold int64) []Response {
	if threshold <= 0 {
		return resps
	}
	used := make([]bool, len(resps))
	var out []Response
	for i := range resps {
		if used[i] {
			continue
		}
		r := resps[i]
		used[i] = true
		if (r.Type != Allreduce && r.Type != Allgather) || len(r.Joined) > 0 {
			out = append(out, r)
			continue
		}
		total := responseBytes(r)
		var skipped int64
		fused := r
		fused.Names = append([]string(nil), r.Names...)
		fused.Counts = append([]int64(nil), r.Counts...)
		fused.RowElems = append([]int64(nil), r.RowElems...)
		for j := i + 1; j < len(resps); j++ {
			if used[j] {
				continue
			}
			s := resps[j]
			size := responseBytes(s)
			if s.Type == r.Type && len(s.Joined) == 0 && s.DType == r.DType && s.ReduceOp == r.ReduceOp &&
				s.Prescale == r.Prescale && s.Postscale == r.Postscale && total+size <= threshold {
				fused.Names = append(fused.Names, s.Names...)
				fused.Counts = append(fused.Counts, s.Counts...)
				fused.RowElems = append(fused.RowElems, s.RowElems...)
				total += size
				used[j] = true
				continue
			}
			skipped += size
			if total+skipped > threshold {
				break
			}
		}
		out = append(out, fused)
	}
	return out
}

func responseBytes(r Response) int64 {
	switch r.Type {
	case Allreduce, Reducescatter:
		var n int64
		for _, c := range r.Counts {
			n += c
		}
		return n * int64(r.DType.Size())
	case Allgather:
		if len(r.Names) == 0 || len(r.RowElems) != len(r.Names) {
			return 0
		}
		ranks := len(r.Counts) / len(r.Names)
		var n int64
		for i, row := range r.RowElems {
			for _, c := range r.Counts[i*ranks : (i+1)*ranks] {
				n += c * row
			}
		}
		return n * int64(r.DType.Size())
	}
	return 0
}
