package sdk

import (
	"strconv"
	"sync"
	"testing"
)

// BenchmarkEngineAllreduce8B: a named 8-byte allreduce through the engine,
// two ranks in this process.
func BenchmarkEngineAllreduce8B(b *testing.B) {
	ws, errs := startWorlds(b, 2, worldOpts{})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]float32, 2)
			for i := 0; i < b.N; i++ {
				if err := w.GlobalProcessSet().AllreduceInPlace(TensorOf(v), ReduceOptions{Op: Sum, Name: "lat"}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// BenchmarkEngineBatch200x4K: 200 tensors of 4 KiB enqueued async then
// waited, two ranks in this process.
func BenchmarkEngineBatch200x4K(b *testing.B) {
	ws, errs := startWorlds(b, 2, worldOpts{})
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	names := make([]string, 200)
	for i := range names {
		names[i] = "grad." + strconv.Itoa(i)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts := make([][]float32, 200)
			for i := range ts {
				ts[i] = make([]float32, 1024)
			}
			hs := make([]*Handle, 200)
			for i := 0; i < b.N; i++ {
				for j, t := range ts {
					h, err := w.GlobalProcessSet().AllreduceInPlaceAsync(TensorOf(t), ReduceOptions{Op: Sum, Name: names[j]})
					if err != nil {
						b.Error(err)
						return
					}
					hs[j] = h
				}
				for _, h := range hs {
					if _, err := h.Wait(); err != nil {
						b.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
