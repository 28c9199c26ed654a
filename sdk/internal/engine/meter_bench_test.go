package engine

import (
	"testing"

	"github.com/hvdorg/hvd/backends"
)

// BenchmarkMeterPerOp is one small allreduce through a one-member engine
// (no sockets: the engine's own path only) with and without a Meter: the
// difference is what the metrics add to every op.
func BenchmarkMeterPerOp(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		var m *Meter
		if on {
			name, m = "on", NewMeter()
		}
		b.Run(name, func(b *testing.B) {
			e, err := New(Config{Data: newSolo(), Control: newSolo(), CacheCapacity: 8, FusionThreshold: 1 << 20, Meter: m})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close(nil)
			o := &Op{Type: Allreduce, Name: "a", ReduceOp: 1}
			data := make([]byte, 64)
			for i := 0; i < b.N; i++ {
				*o = Op{Type: Allreduce, Name: "a", In: Tensor{Data: data, DType: backends.Float32, Shape: []int64{16}}, ReduceOp: 1}
				o.Out = o.In
				if err := e.Enqueue(o); err != nil {
					b.Fatal(err)
				}
				if err := o.Handle().Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMeterHooks is the hooks' own work for one op (enqueue stamp,
// pick, execute, done), without the engine around them: on a machine too
// noisy for BenchmarkMeterPerOp's difference, this is the added cost.
func BenchmarkMeterHooks(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		var m *Meter
		if on {
			name, m = "on", NewMeter()
		}
		b.Run(name, func(b *testing.B) {
			e := &Engine{cfg: Config{Meter: m, FusionThreshold: 1 << 20}, table: map[string]*Op{}}
			o := &Op{Type: Allreduce, Name: "a", In: Tensor{Data: make([]byte, 64)}}
			r := &Response{Type: Allreduce, Names: []string{"a"}}
			e.table["a"] = o
			for i := 0; i < b.N; i++ {
				o.enqAt, o.pickAt = 0, 0
				o.h = Handle{done: make(chan struct{})}
				if e.cfg.Meter != nil { // Enqueue's stamp
					o.enqAt = nanotime()
				}
				e.queue = append(e.queue[:0], Request{Name: "a"})
				e.meterPicked()
				e.meterExecute(r)
				e.meterDone(o)
				o.h.finish()
				e.meterExecuted()
			}
		})
	}
}
