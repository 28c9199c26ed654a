//go:build ignore

// Probe for issue 18 (see README.md here; output in bench/results/2026-12-01-raw18/probes/results.txt): go run this file (pipeline_copy.go with pipeline_nt.go and pipeline_nt_amd64.s from a scratch module).
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func alloc(n int, huge bool) []byte {
	b := make([]byte, n)
	if huge {
		const h = 2 << 20
		s := uintptr(unsafe.Pointer(&b[0]))
		lo := (s + h - 1) &^ (h - 1)
		hi := (s + uintptr(n)) &^ (h - 1)
		if hi > lo {
			unix.Madvise(b[lo-s:hi-s], unix.MADV_HUGEPAGE)
		}
	}
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func readAt(pid int, dst []byte, addr uintptr) {
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(dst)}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if err != nil {
			panic(err)
		}
		dst = dst[n:]
		addr += uintptr(n)
	}
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		n, _ := strconv.Atoi(os.Args[2])
		b := alloc(n, os.Args[3] == "1")
		fmt.Printf("%d\n", uintptr(unsafe.Pointer(&b[0])))
		os.Stdin.Read(make([]byte, 1))
		_ = b[0]
		return
	}
	for _, n := range []int{1 << 20, 64 << 20, 256 << 20} {
		for _, huge := range []bool{false, true} {
			cmd := exec.Command(os.Args[0], "child", strconv.Itoa(n), map[bool]string{true: "1", false: "0"}[huge])
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			cmd.Start()
			line, _ := bufio.NewReader(out).ReadString('\n')
			addr, _ := strconv.ParseUint(line[:len(line)-1], 10, 64)
			dst := alloc(n, huge)
			src := alloc(n, huge)
			for _, chunk := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, n} {
				if chunk > n {
					continue
				}
				reps := max(1, (512<<20)/n)
				best := time.Hour
				for t := 0; t < 3; t++ {
					t0 := time.Now()
					for r := 0; r < reps; r++ {
						for off := 0; off < n; off += chunk {
							readAt(cmd.Process.Pid, dst[off:off+chunk], uintptr(addr)+uintptr(off))
						}
					}
					best = min(best, time.Since(t0)/time.Duration(reps))
				}
				fmt.Printf("n=%-10d huge=%-5v chunk=%-10d %8.1f us %6.2f GB/s\n", n, huge, chunk, float64(best.Nanoseconds())/1e3, float64(n)/float64(best.Nanoseconds()))
			}
			reps := max(1, (512<<20)/n)
			best := time.Hour
			for t := 0; t < 3; t++ {
				t0 := time.Now()
				for r := 0; r < reps; r++ {
					copy(dst, src)
				}
				best = min(best, time.Since(t0)/time.Duration(reps))
			}
			fmt.Printf("n=%-10d huge=%-5v memcpy           %8.1f us %6.2f GB/s\n", n, huge, float64(best.Nanoseconds())/1e3, float64(n)/float64(best.Nanoseconds()))
			in.Close()
			cmd.Wait()
		}
	}
}
