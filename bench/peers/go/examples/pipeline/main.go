// Command pipeline is the Go version of examples/pipeline.c: P producer
// goroutines each send 1..M through one bounded channel to one consumer,
// which adds them up until every producer is done.
//
//	pipeline [P] [M] [capacity] [workers]   (defaults: 8 100000 64 all CPUs)
//
// Prints "sum S" and exits 0 when S is P * M * (M + 1) / 2.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// arg is the i-th positional argument as a number, or def when absent.
func arg(i int, def uint64) uint64 {
	if len(os.Args) <= i {
		return def
	}
	v, err := strconv.ParseUint(os.Args[i], 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(2)
	}
	return v
}

func main() {
	producers, count, capacity := arg(1, 8), arg(2, 100000), arg(3, 64)
	if workers := arg(4, 0); workers > 0 {
		runtime.GOMAXPROCS(int(workers))
	}
	ch := make(chan uint64, capacity)
	var wg sync.WaitGroup
	for i := uint64(0); i < producers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := uint64(1); n <= count; n++ {
				ch <- n
			}
		}()
	}
	go func() {
		wg.Wait()
		close(ch)
	}()
	sum := uint64(0)
	for n := range ch {
		sum += n
	}
	fmt.Println("sum", sum)
	if sum != producers*(count*(count+1)/2) {
		os.Exit(1)
	}
}
