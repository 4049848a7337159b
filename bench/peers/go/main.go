// The workloads of asyncrt-bench (defined at the top of bench/bench.c and in
// docs/benchmarks.md), run on Go's goroutine scheduler, so that asyncrt's
// figures can be set beside Go's on the same machine in the same run
// (scripts/compare). One process, one "runtime": Go's, configured once
// through GOMAXPROCS = -workers.
//
// Output: one line per workload on stdout, in asyncrt-bench's format:
//
//	bench <workload> runtime=go workers=<W> ops=<N> median_ns_per_op=<x> min_ns_per_op=<x> max_ns_per_op=<x> [extra=value ...]
//
// Each workload: 1 warm-up repetition + --reps measured repetitions (default 5).
// Between repetitions (outside the timed region) runtime.GC() is called so that
// garbage of one repetition is not collected inside the next one; collections
// caused by a repetition's own allocations stay inside its time.
//
// tcp_echo: the server side is `-echo-server PORT` (PORT 0 = any free port); the
// figures come from the repository's load generator (bench/echo_client.c),
// which bench/peers/echo-bench runs against it and turns into the bench line.
//
// Standard library only, so it builds offline:
//
//	GOTOOLCHAIN=local GOPROXY=off GOFLAGS=-mod=mod go build -o go-peer-bench .
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Workload parameters: the defaults are asyncrt-bench's.
var (
	flagWorkers = flag.Int("workers", runtime.NumCPU(), "GOMAXPROCS (default: number of online CPUs)")
	flagReps    = flag.Int("reps", 5, "measured repetitions per workload (after 1 warm-up)")
	flagOnly    = flag.String("only", "", "run only this workload (comma-separated list allowed)")
	flagIdle    = flag.Int("idle-fibers", 0, "only start N goroutines that each wait on a channel receive and print their memory")
	flagJSON    = flag.String("json", "", "also write the figures as a JSON array to this file")
	flagEcho    = flag.String("echo-server", "", "run the tcp_echo server on 127.0.0.1:PORT instead of the benchmarks (0 = any free port)")

	flagSpawnN   = flag.Int("spawn-n", 100000, "spawn_local/spawn_remote: tasks per repetition")
	flagYieldT   = flag.Int("yield-tasks", 1000, "yield_many: tasks")
	flagYieldY   = flag.Int("yields", 1000, "yield_many: yields per task")
	flagPPPairs  = flag.Int("pp-pairs", 1000, "ping_pong: pairs")
	flagPPRounds = flag.Int("pp-rounds", 100, "ping_pong: round trips per pair")
	flagChainD   = flag.Int("chain-depth", 100000, "chained_spawn: chain length")
	flagFibN     = flag.Int("fib", 27, "fork_join: fib(n)")
	flagTimerN   = flag.Int("timers-n", 100000, "timers: tasks")
	flagSelectT  = flag.Int("select-tasks", 1000, "select: tasks, in pairs (pp-rounds round trips each)")
)

type kv struct {
	k string
	v string
}

type result struct {
	name    string
	workers int
	ops     int64
	median  float64
	min     float64
	max     float64
	extra   []kv
}

var results []result

func fmtF(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

func emit(r result) {
	var b strings.Builder
	fmt.Fprintf(&b, "bench %s runtime=go workers=%d ops=%d median_ns_per_op=%s min_ns_per_op=%s max_ns_per_op=%s",
		r.name, r.workers, r.ops, fmtF(r.median), fmtF(r.min), fmtF(r.max))
	for _, e := range r.extra {
		fmt.Fprintf(&b, " %s=%s", e.k, e.v)
	}
	fmt.Println(b.String())
	results = append(results, r)
}

// measure runs fn once as warm-up and then reps times; fn returns the time of
// one repetition. ns/op figures are time/ops. It returns the per-rep durations.
// reportAs, when set, replaces the name measure reports: the fiber
// workloads of asyncrt are the goroutine workloads here, reported again
// under the fiber names (goroutines are Go's fibers).
var reportAs string

func measure(name string, ops int64, fn func() time.Duration, extra func([]time.Duration) []kv) {
	if reportAs != "" {
		name = reportAs
	}
	runtime.GC()
	fn() // warm-up
	durs := make([]time.Duration, *flagReps)
	per := make([]float64, *flagReps)
	for i := range durs {
		runtime.GC()
		durs[i] = fn()
		per[i] = float64(durs[i].Nanoseconds()) / float64(ops)
	}
	sorted := append([]float64(nil), per...)
	sort.Float64s(sorted)
	r := result{name: name, workers: *flagWorkers, ops: ops,
		median: median(sorted), min: sorted[0], max: sorted[len(sorted)-1]}
	if extra != nil {
		r.extra = extra(durs)
	}
	emit(r)
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// onRuntime runs f on a goroutine (a task of the runtime) and waits for it:
// the timed part of every workload runs inside the runtime, not on main's thread.
func onRuntime(f func() time.Duration) time.Duration {
	ch := make(chan time.Duration, 1)
	go func() { ch <- f() }()
	return <-ch
}

// ---- spawn_local / spawn_remote ------------------------------------------

// spawnN spawns n goroutines from the calling goroutine; each decrements a
// shared counter atomically, the one reaching zero signals completion.
func spawnN(n int) time.Duration {
	counter := int64(n)
	done := make(chan struct{})
	start := time.Now()
	for i := 0; i < n; i++ {
		go func() {
			if atomic.AddInt64(&counter, -1) == 0 {
				close(done)
			}
		}()
	}
	<-done
	return time.Since(start)
}

func benchSpawnLocal() {
	n := *flagSpawnN
	measure("spawn_local", int64(n), func() time.Duration {
		return onRuntime(func() time.Duration { return spawnN(n) })
	}, nil)
}

// spawn_remote: Go has no way to create a goroutine from a "foreign" OS thread
// that is not one of its workers: every `go` statement executes Go code, and Go
// code only runs on an M (OS thread) that holds a P (one of the GOMAXPROCS
// worker slots); even a cgo callback from a C-created pthread first acquires a
// P. The closest analogue is a goroutine pinned to its own dedicated OS thread
// with runtime.LockOSThread(): no other goroutine ever runs on that thread, but
// while it spawns it still holds one of the W Ps, and new goroutines go to that
// P's local run queue (the other P steals them). When it blocks waiting for the
// signal, its thread parks and hands the P to another thread. So this line
// measures "spawn from a dedicated, locked OS thread", not a true remote spawn.
func benchSpawnRemote() {
	n := *flagSpawnN
	measure("spawn_remote", int64(n), func() time.Duration {
		ch := make(chan time.Duration, 1)
		go func() {
			runtime.LockOSThread()
			d := spawnN(n)
			runtime.UnlockOSThread()
			ch <- d
		}()
		return <-ch
	}, nil)
}

// ---- yield_many -------------------------------------------------------------

// Each task yields with runtime.Gosched(), which puts the goroutine back on the
// scheduler's (global) run queue and runs something else: Go's only explicit yield.
func benchYieldMany() {
	t, y := *flagYieldT, *flagYieldY
	measure("yield_many", int64(t)*int64(y), func() time.Duration {
		return onRuntime(func() time.Duration {
			counter := int64(t)
			done := make(chan struct{})
			start := time.Now()
			for i := 0; i < t; i++ {
				go func() {
					for j := 0; j < y; j++ {
						runtime.Gosched()
					}
					if atomic.AddInt64(&counter, -1) == 0 {
						close(done)
					}
				}()
			}
			<-done
			return time.Since(start)
		})
	}, nil)
}

// ---- ping_pong ----------------------------------------------------------------

// P pairs; each pair has two single-slot channels (make(chan int, 1): buffered
// with capacity 1, the Go form of a single-slot channel). The pinger sends the
// token on a and waits for it on b; the ponger receives on a, sends on b.
// The timed region includes creating the channels and spawning the 2*P tasks.
func benchPingPong() {
	pairs, rounds := *flagPPPairs, *flagPPRounds
	measure("ping_pong", int64(pairs)*int64(rounds), func() time.Duration {
		return onRuntime(func() time.Duration {
			counter := int64(pairs)
			done := make(chan struct{})
			var bad int64
			start := time.Now()
			for p := 0; p < pairs; p++ {
				a := make(chan int, 1)
				b := make(chan int, 1)
				go func() { // ponger
					for r := 0; r < rounds; r++ {
						v := <-a
						b <- v + 1
					}
				}()
				go func() { // pinger
					tok := 0
					for r := 0; r < rounds; r++ {
						a <- tok
						tok = <-b
					}
					if tok != rounds {
						atomic.AddInt64(&bad, 1)
					}
					if atomic.AddInt64(&counter, -1) == 0 {
						close(done)
					}
				}()
			}
			<-done
			d := time.Since(start)
			if bad != 0 {
				fmt.Fprintln(os.Stderr, "ping_pong: token mismatch")
				os.Exit(1)
			}
			return d
		})
	}, nil)
}

// ---- select ---------------------------------------------------------------------

// recvOrSleep is one receive of the select workload: the channel, or a one
// second timer that never fires (stopped once the value came, as a deadline
// in a Go server is).
func recvOrSleep(ch chan int) int {
	t := time.NewTimer(time.Second)
	select {
	case v := <-ch:
		t.Stop()
		return v
	case <-t.C:
		fmt.Fprintln(os.Stderr, "select: the 1 s timer fired")
		os.Exit(1)
		return 0
	}
}

// T tasks in T/2 pairs pass a token as in ping_pong, but every receive is a
// select over the channel and a timer. One op: one select. Go's select is
// always fair (a random order), so select and select_fair are the same.
func benchSelect()     { benchSelectAs("select") }
func benchSelectFair() { benchSelectAs("select_fair") }

func benchSelectAs(name string) {
	pairs, rounds := *flagSelectT/2, *flagPPRounds
	measure(name, int64(pairs)*2*int64(rounds), func() time.Duration {
		return onRuntime(func() time.Duration {
			counter := int64(pairs)
			done := make(chan struct{})
			var bad int64
			start := time.Now()
			for p := 0; p < pairs; p++ {
				a := make(chan int, 1)
				b := make(chan int, 1)
				go func() { // ponger
					for r := 0; r < rounds; r++ {
						b <- recvOrSleep(a) + 1
					}
				}()
				go func() { // pinger
					tok := 0
					for r := 0; r < rounds; r++ {
						a <- tok
						tok = recvOrSleep(b)
					}
					if tok != rounds {
						atomic.AddInt64(&bad, 1)
					}
					if atomic.AddInt64(&counter, -1) == 0 {
						close(done)
					}
				}()
			}
			<-done
			d := time.Since(start)
			if bad != 0 {
				fmt.Fprintln(os.Stderr, "select: token mismatch")
				os.Exit(1)
			}
			return d
		})
	}, nil)
}

// ---- chained_spawn ------------------------------------------------------------

func chainStep(left int, done chan struct{}) {
	if left == 1 {
		close(done)
		return
	}
	go chainStep(left-1, done)
}

func benchChainedSpawn() {
	d := *flagChainD
	measure("chained_spawn", int64(d), func() time.Duration {
		return onRuntime(func() time.Duration {
			done := make(chan struct{})
			start := time.Now()
			go chainStep(d, done) // task 1 of d
			<-done
			return time.Since(start)
		})
	}, nil)
}

// ---- fork_join ----------------------------------------------------------------

// fib(n) as a task: for n >= 2 it spawns fib(n-1) and fib(n-2) as two goroutines,
// each with its own result channel (capacity 1, so a finished child never blocks:
// the channel plays the join handle), waits for both and adds the results.
func fibTask(n int, out chan<- int) {
	if n < 2 {
		out <- n
		return
	}
	c1 := make(chan int, 1)
	c2 := make(chan int, 1)
	go fibTask(n-1, c1)
	go fibTask(n-2, c2)
	out <- <-c1 + <-c2
}

func fibPlain(n int) int {
	a, b := 0, 1
	for i := 0; i < n; i++ {
		a, b = b, a+b
	}
	return a
}

func benchForkJoin() {
	n := *flagFibN
	tasks := int64(2*fibPlain(n+1) - 1) // every call of the tree is one spawned task, root included
	want := fibPlain(n)
	measure("fork_join", tasks, func() time.Duration {
		return onRuntime(func() time.Duration {
			out := make(chan int, 1)
			start := time.Now()
			go fibTask(n, out)
			got := <-out
			d := time.Since(start)
			if got != want {
				fmt.Fprintf(os.Stderr, "fork_join: fib(%d)=%d, want %d\n", n, got, want)
				os.Exit(1)
			}
			return d
		})
	}, nil)
}

// ---- timers -------------------------------------------------------------------

// N tasks; task i sleeps d_i = 1 + (i*7919 mod 50) ms with time.Sleep. The
// deadline is taken right before time.Sleep (time.Now() + d_i); lateness is the
// time read right after it returns minus that deadline. Lateness percentiles are
// over all samples of all measured repetitions pooled (reps*N samples); total_ms
// is the median wall time of a repetition (first spawn to last completion).
func benchTimers() {
	n := *flagTimerN
	var lates []int64
	measuring := false
	measure("timers", int64(n), func() time.Duration {
		late := make([]int64, n)
		d := onRuntime(func() time.Duration {
			counter := int64(n)
			done := make(chan struct{})
			start := time.Now()
			for i := 0; i < n; i++ {
				go func(i int) {
					dur := time.Duration(1+(i*7919)%50) * time.Millisecond
					t0 := time.Now()
					time.Sleep(dur)
					late[i] = int64(time.Since(t0) - dur)
					if atomic.AddInt64(&counter, -1) == 0 {
						close(done)
					}
				}(i)
			}
			<-done
			return time.Since(start)
		})
		if measuring {
			lates = append(lates, late...)
		}
		measuring = true // the first call is the warm-up
		return d
	}, func(durs []time.Duration) []kv {
		ms := make([]float64, len(durs))
		for i, d := range durs {
			ms[i] = float64(d.Nanoseconds()) / 1e6
		}
		sort.Float64s(ms)
		sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
		pct := func(p float64) string {
			idx := int(p * float64(len(lates)-1))
			return fmtF(float64(lates[idx]) / 1e3)
		}
		return []kv{
			{"total_ms", fmtF(median(ms))},
			{"late_p50_us", pct(0.50)},
			{"late_p99_us", pct(0.99)},
			{"late_max_us", fmtF(float64(lates[len(lates)-1]) / 1e3)},
		}
	})
}

// ---- sleep_1ms -----------------------------------------------------------------

// One goroutine sleeps 1 ms, 1000 times in a row, on an otherwise idle
// runtime, and records how late each sleep woke it. One op: one sleep.
func benchSleep1ms() {
	const count = 1000
	var lates []int64
	measuring := false
	measure("sleep_1ms", count, func() time.Duration {
		late := make([]int64, count)
		d := onRuntime(func() time.Duration {
			done := make(chan time.Duration)
			go func() {
				start := time.Now()
				for i := 0; i < count; i++ {
					t0 := time.Now()
					time.Sleep(time.Millisecond)
					late[i] = int64(time.Since(t0) - time.Millisecond)
				}
				done <- time.Since(start)
			}()
			return <-done
		})
		if measuring {
			lates = append(lates, late...)
		}
		measuring = true // the first call is the warm-up
		return d
	}, func(durs []time.Duration) []kv {
		sort.Slice(lates, func(i, j int) bool { return lates[i] < lates[j] })
		pct := func(p float64) string {
			idx := int(p * float64(len(lates)-1))
			return fmtF(float64(lates[idx]) / 1e3)
		}
		return []kv{
			{"late_p50_us", pct(0.50)},
			{"late_p99_us", pct(0.99)},
			{"late_max_us", fmtF(float64(lates[len(lates)-1]) / 1e3)},
		}
	})
}

// ---- tcp_echo server ---------------------------------------------------------

// One goroutine per connection; it reads up to 4 KiB and writes it all back
// (net.Conn.Write returns only when everything is written). Go's net package
// sets TCP_NODELAY on every TCP connection by default.
func echoConn(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func echoServer(port string) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo-server:", err)
		os.Exit(1)
	}
	fmt.Printf("listening %s runtime=go workers=%d\n", ln.Addr().String(), *flagWorkers)
	os.Stdout.Sync()
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo-server: accept:", err)
			continue
		}
		go echoConn(c)
	}
}

// ---- JSON ------------------------------------------------------------------

func writeJSON(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	io.WriteString(w, "[\n")
	for i, r := range results {
		fmt.Fprintf(w, `  {"workload": %q, "runtime": "go", "workers": %d, "ops": %d, "median_ns_per_op": %s, "min_ns_per_op": %s, "max_ns_per_op": %s`,
			r.name, r.workers, r.ops, fmtF(r.median), fmtF(r.min), fmtF(r.max))
		for _, e := range r.extra {
			fmt.Fprintf(w, `, %q: %s`, e.k, e.v)
		}
		io.WriteString(w, "}")
		if i < len(results)-1 {
			io.WriteString(w, ",")
		}
		io.WriteString(w, "\n")
	}
	io.WriteString(w, "]\n")
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// ---- main ------------------------------------------------------------------

func main() {
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if *flagWorkers < 1 || *flagReps < 1 {
		fmt.Fprintln(os.Stderr, "--workers and --reps must be >= 1")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*flagWorkers)

	if *flagEcho != "" {
		echoServer(*flagEcho)
		return
	}
	if *flagIdle > 0 {
		idleGoroutines(*flagIdle)
		return
	}

	all := []struct {
		name string
		fn   func()
	}{
		{"spawn_local", benchSpawnLocal},
		{"spawn_remote", benchSpawnRemote},
		{"yield_many", benchYieldMany},
		{"ping_pong", benchPingPong},
		{"chained_spawn", benchChainedSpawn},
		{"fork_join", benchForkJoin},
		{"timers", benchTimers},
		{"sleep_1ms", benchSleep1ms},
		{"select", benchSelect},
		{"select_fair", benchSelectFair},
		{"fiber_spawn", as("fiber_spawn", benchSpawnLocal)},
		{"fiber_spawn_remote", as("fiber_spawn_remote", benchSpawnRemote)},
		{"fiber_yield", as("fiber_yield", benchYieldMany)},
		{"fiber_ping_pong", as("fiber_ping_pong", benchPingPong)},
		{"fiber_chained_spawn", as("fiber_chained_spawn", benchChainedSpawn)},
		{"fiber_fork_join", as("fiber_fork_join", benchForkJoin)},
		{"fiber_skynet", benchSkynet},
	}
	want := map[string]bool{}
	if *flagOnly != "" {
		for _, s := range strings.Split(*flagOnly, ",") {
			want[strings.TrimSpace(s)] = true
		}
		for name := range want {
			known := name == "tcp_echo"
			for _, w := range all {
				known = known || w.name == name
			}
			if !known {
				fmt.Fprintf(os.Stderr, "unknown workload %q\n", name)
				os.Exit(2)
			}
		}
		if want["tcp_echo"] {
			fmt.Fprintln(os.Stderr, "tcp_echo: bench/peers/run go --only tcp_echo runs it (this program is its server: -echo-server PORT)")
		}
	}
	for _, w := range all {
		if len(want) == 0 || want[w.name] {
			w.fn()
		}
	}
	if *flagJSON != "" {
		if err := writeJSON(*flagJSON); err != nil {
			fmt.Fprintln(os.Stderr, "json:", err)
			os.Exit(1)
		}
	}
}

// as runs a goroutine workload under a fiber workload's name.
func as(name string, fn func()) func() {
	return func() {
		reportAs = name
		fn()
		reportAs = ""
	}
}

// ---- fiber_skynet ------------------------------------------------------------

// skynet: a goroutine per node of a 10-ary tree of depth 6; leaf i returns
// i, every node the sum of its ten children (received over a channel).
func skynet(out chan<- int, num, size int) {
	if size == 1 {
		out <- num
		return
	}
	rc := make(chan int, 10)
	size /= 10
	for i := 0; i < 10; i++ {
		go skynet(rc, num+i*size, size)
	}
	sum := 0
	for i := 0; i < 10; i++ {
		sum += <-rc
	}
	out <- sum
}

func benchSkynet() {
	measure("fiber_skynet", 1111111, func() time.Duration {
		return onRuntime(func() time.Duration {
			start := time.Now()
			out := make(chan int, 1)
			go skynet(out, 0, 1000000)
			sum := <-out
			d := time.Since(start)
			if sum != 499999500000 {
				fmt.Fprintln(os.Stderr, "fiber_skynet: wrong sum", sum)
				os.Exit(1)
			}
			return d
		})
	}, nil)
}

// ---- --idle-fibers ------------------------------------------------------------

// rssKiB reads VmRSS from /proc/self/status.
func rssKiB() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle_fibers:", err)
		os.Exit(1)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")), "%d", &kib)
			return kib
		}
	}
	return 0
}

// idleGoroutines starts n goroutines that each wait on one channel receive
// and prints the memory they take once all wait, as asyncrt-bench
// --idle-fibers does for fibers.
func idleGoroutines(n int) {
	runtime.GC()
	before := rssKiB()
	ch := make(chan int)
	var waiting int64
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			atomic.AddInt64(&waiting, 1)
			<-ch
			wg.Done()
		}()
	}
	for atomic.LoadInt64(&waiting) < int64(n) {
		runtime.Gosched()
	}
	time.Sleep(100 * time.Millisecond)
	after := rssKiB()
	fmt.Printf("bench idle_fibers runtime=go workers=%d ops=%d rss_kib=%d rss_per_fiber_b=%.0f\n",
		*flagWorkers, n, after, float64(after-before)*1024/float64(n))
	close(ch)
	wg.Wait()
}
