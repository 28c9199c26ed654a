package sdk

import (
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
