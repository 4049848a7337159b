//! The workloads of asyncrt-bench (defined at the top of `bench/bench.c` and in
//! `docs/benchmarks.md`), run on Tokio, so that asyncrt's figures can be set
//! beside Tokio's on the same machine in the same run (`scripts/compare`).
//!
//! One multi-thread runtime with W workers is created once; every workload runs
//! 1 warm-up and R measured repetitions on it, and prints one line:
//!
//!   bench <workload> runtime=tokio workers=W ops=N median_ns_per_op=x
//!         min_ns_per_op=x max_ns_per_op=x [extra=value ...]
//!
//! `tcp_echo` needs an external client; this binary provides its server side
//! (`--echo-server PORT`), and `bench/peers/echo-bench` drives it with the repository's
//! own load generator, `bench/echo_client.c`.

use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::process::exit;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::{mpsc, Notify};

const WORKLOADS: &[&str] = &[
    "spawn_local",
    "spawn_remote",
    "yield_many",
    "ping_pong",
    "chained_spawn",
    "fork_join",
    "timers",
    "sleep_1ms",
    "select",
    "select_fair",
];

/// Workload parameters; the defaults are asyncrt-bench's.
#[derive(Clone, Debug)]
struct Params {
    spawn_n: usize,     // spawn_local / spawn_remote: N
    yield_tasks: usize, // yield_many: T
    yield_count: usize, // yield_many: Y
    pairs: usize,       // ping_pong: P
    rounds: usize,      // ping_pong: R (round trips per pair)
    chain_depth: usize, // chained_spawn: D
    fib_n: u32,         // fork_join: fib(n)
    timers_n: usize,    // timers: N
    select_tasks: usize, // select: T (T/2 pairs, R round trips each)
}

impl Default for Params {
    fn default() -> Self {
        Params {
            spawn_n: 100_000,
            yield_tasks: 1_000,
            yield_count: 1_000,
            pairs: 1_000,
            rounds: 100,
            chain_depth: 100_000,
            fib_n: 27,
            timers_n: 100_000,
            select_tasks: 1_000,
        }
    }
}

struct Options {
    workers: usize,
    reps: usize,
    only: Option<String>,
    json: Option<String>,
    echo_server: Option<u16>,
    verbose: bool,
    params: Params,
}

/// What one repetition measured.
struct Sample {
    elapsed: Duration,
    /// Extra fields (name, value) printed after the standard ones.
    extras: Vec<(&'static str, f64)>,
}

impl Sample {
    fn plain(elapsed: Duration) -> Self {
        Sample { elapsed, extras: Vec::new() }
    }
}

// ---------------------------------------------------------------------------
// Completion signals
// ---------------------------------------------------------------------------

/// Countdown latch awaited by a task: each finishing task decrements the shared
/// counter; the one that reaches zero signals through a `Notify` (which keeps a
/// permit if the waiter is not waiting yet).
struct Latch {
    remaining: AtomicUsize,
    notify: Notify,
}

impl Latch {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Latch { remaining: AtomicUsize::new(n), notify: Notify::new() })
    }
    fn count_down(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.notify.notify_one();
        }
    }
    async fn wait(&self) {
        self.notify.notified().await;
    }
}

/// Countdown latch awaited by a plain OS thread (park/unpark).
struct ThreadLatch {
    remaining: AtomicUsize,
    done: AtomicBool,
    waiter: std::thread::Thread,
}

impl ThreadLatch {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(ThreadLatch {
            remaining: AtomicUsize::new(n),
            done: AtomicBool::new(false),
            waiter: std::thread::current(),
        })
    }
    fn count_down(&self) {
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.store(true, Ordering::Release);
            self.waiter.unpark();
        }
    }
    fn wait(&self) {
        while !self.done.load(Ordering::Acquire) {
            std::thread::park();
        }
    }
}

/// Runs `fut` as a task on a worker of the runtime (not on the thread calling
/// `block_on`) and returns its output.
fn on_worker<F>(rt: &Runtime, fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    rt.block_on(async move { tokio::spawn(fut).await.expect("orchestrator task panicked") })
}

// ---------------------------------------------------------------------------
// Workloads
// ---------------------------------------------------------------------------

/// spawn_local: a task running on the runtime spawns N tasks; each decrements a
/// shared counter; the one reaching zero signals. Time: first spawn -> signal.
fn spawn_local(rt: &Runtime, p: &Params) -> Sample {
    let n = p.spawn_n;
    on_worker(rt, async move {
        let latch = Latch::new(n);
        let start = Instant::now();
        for _ in 0..n {
            let l = latch.clone();
            tokio::spawn(async move { l.count_down() });
        }
        latch.wait().await;
        Sample::plain(start.elapsed())
    })
}

/// spawn_remote: the same N tasks, spawned from a plain OS thread (the main
/// thread, which is not a worker) through a runtime handle.
fn spawn_remote(rt: &Runtime, p: &Params) -> Sample {
    let n = p.spawn_n;
    let handle = rt.handle().clone();
    let latch = ThreadLatch::new(n);
    let start = Instant::now();
    for _ in 0..n {
        let l = latch.clone();
        handle.spawn(async move { l.count_down() });
    }
    latch.wait();
    Sample::plain(start.elapsed())
}

/// A future that wakes itself by reference and returns Pending once, then
/// completes: one yield, exactly as asyncrt-bench's yield_many does. (tokio's own
/// `yield_now` in 1.24 defers the wake to the scheduler instead.)
struct YieldOnce {
    yielded: bool,
}

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            Poll::Ready(())
        } else {
            self.yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// yield_many: T tasks each yield Y times; time until all T finish.
fn yield_many(rt: &Runtime, p: &Params) -> Sample {
    let (t, y) = (p.yield_tasks, p.yield_count);
    on_worker(rt, async move {
        let latch = Latch::new(t);
        let start = Instant::now();
        for _ in 0..t {
            let l = latch.clone();
            tokio::spawn(async move {
                for _ in 0..y {
                    YieldOnce { yielded: false }.await;
                }
                l.count_down();
            });
        }
        latch.wait().await;
        Sample::plain(start.elapsed())
    })
}

/// ping_pong: P pairs of tasks; each pair passes a token back and forth R round
/// trips through two tokio::sync::mpsc channels of capacity 1.
fn ping_pong(rt: &Runtime, p: &Params) -> Sample {
    let (pairs, rounds) = (p.pairs, p.rounds);
    on_worker(rt, async move {
        let latch = Latch::new(2 * pairs);
        let start = Instant::now();
        for _ in 0..pairs {
            let (tx_ab, mut rx_ab) = mpsc::channel::<u64>(1);
            let (tx_ba, mut rx_ba) = mpsc::channel::<u64>(1);
            let la = latch.clone();
            let lb = latch.clone();
            // pinger: sends the token, waits for it to come back
            tokio::spawn(async move {
                let mut token = 0u64;
                for _ in 0..rounds {
                    tx_ab.send(token).await.expect("ponger gone");
                    token = rx_ba.recv().await.expect("ponger gone");
                }
                assert_eq!(token, rounds as u64);
                la.count_down();
            });
            // ponger: receives the token, sends it back incremented
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let token = rx_ab.recv().await.expect("pinger gone");
                    tx_ba.send(token + 1).await.expect("pinger gone");
                }
                lb.count_down();
            });
        }
        latch.wait().await;
        Sample::plain(start.elapsed())
    })
}

/// One receive of the select workload: the channel or a 1 s sleep, which never
/// fires. Biased (the channel is polled first, as asyncrt's
/// rt_select_biased_init does) for `select`, in select!'s default random
/// order for `select_fair`.
async fn recv_or_sleep(rx: &mut mpsc::Receiver<u64>, fair: bool) -> u64 {
    if fair {
        return tokio::select! {
            v = rx.recv() => v.expect("peer gone"),
            _ = tokio::time::sleep(Duration::from_secs(1)) => panic!("select: the 1 s sleep fired"),
        };
    }
    tokio::select! {
        biased;
        v = rx.recv() => v.expect("peer gone"),
        _ = tokio::time::sleep(Duration::from_secs(1)) => panic!("select: the 1 s sleep fired"),
    }
}

/// select: T tasks in T/2 pairs pass a token back and forth R round trips, as
/// in ping_pong, but every receive is a select over the channel and a sleep.
fn select(rt: &Runtime, p: &Params, fair: bool) -> Sample {
    let (pairs, rounds) = (p.select_tasks / 2, p.rounds);
    on_worker(rt, async move {
        let latch = Latch::new(2 * pairs);
        let start = Instant::now();
        for _ in 0..pairs {
            let (tx_ab, mut rx_ab) = mpsc::channel::<u64>(1);
            let (tx_ba, mut rx_ba) = mpsc::channel::<u64>(1);
            let la = latch.clone();
            let lb = latch.clone();
            tokio::spawn(async move {
                let mut token = 0u64;
                for _ in 0..rounds {
                    tx_ab.send(token).await.expect("ponger gone");
                    token = recv_or_sleep(&mut rx_ba, fair).await;
                }
                assert_eq!(token, rounds as u64);
                la.count_down();
            });
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let token = recv_or_sleep(&mut rx_ab, fair).await;
                    tx_ba.send(token + 1).await.expect("pinger gone");
                }
                lb.count_down();
            });
        }
        latch.wait().await;
        Sample::plain(start.elapsed())
    })
}

/// chained_spawn: spawns the task that is `remaining` steps from the end of the
/// chain; it spawns its successor and completes; the last one signals.
fn chain_link(remaining: usize, latch: Arc<Latch>) {
    tokio::spawn(async move {
        if remaining == 0 {
            latch.count_down();
        } else {
            chain_link(remaining - 1, latch);
        }
    });
}

fn chained_spawn(rt: &Runtime, p: &Params) -> Sample {
    let d = p.chain_depth;
    assert!(d >= 1);
    on_worker(rt, async move {
        let latch = Latch::new(1);
        let start = Instant::now();
        chain_link(d - 1, latch.clone()); // D tasks in all
        latch.wait().await;
        Sample::plain(start.elapsed())
    })
}

/// fork_join: fib(n) where each call with n >= 2 spawns fib(n-1) and fib(n-2) as
/// two tasks and awaits both join handles (boxed recursion).
fn fib(n: u32) -> Pin<Box<dyn Future<Output = u64> + Send>> {
    Box::pin(async move {
        if n < 2 {
            n as u64
        } else {
            let a = tokio::spawn(fib(n - 1));
            let b = tokio::spawn(fib(n - 2));
            a.await.expect("fib task panicked") + b.await.expect("fib task panicked")
        }
    })
}

fn fib_seq(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        let c = a + b;
        a = b;
        b = c;
    }
    a
}

fn fork_join(rt: &Runtime, p: &Params) -> Sample {
    let n = p.fib_n;
    let expect = fib_seq(n);
    on_worker(rt, async move {
        let start = Instant::now();
        // the root call is itself a task: 2*fib(n+1)-1 tasks in all
        let r = tokio::spawn(fib(n)).await.expect("fib task panicked");
        let elapsed = start.elapsed();
        assert_eq!(r, expect, "fork_join computed a wrong fib({n})");
        Sample::plain(elapsed)
    })
}

/// Nearest-rank percentile of a sorted slice.
fn percentile(sorted: &[i64], pct: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((pct / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// timers: N tasks each sleep d_i = 1 + (i*7919 mod 50) ms (tokio::time::sleep),
/// then record their lateness (wake time minus deadline) and complete.
fn timers(rt: &Runtime, p: &Params) -> Sample {
    let n = p.timers_n;
    let late_ns: Arc<Vec<AtomicI64>> = Arc::new((0..n).map(|_| AtomicI64::new(0)).collect());
    let lates = late_ns.clone();
    let elapsed = on_worker(rt, async move {
        let latch = Latch::new(n);
        let start = Instant::now();
        for i in 0..n {
            let l = latch.clone();
            let lates = lates.clone();
            let d = Duration::from_millis(1 + ((i as u64 * 7919) % 50));
            tokio::spawn(async move {
                let deadline = Instant::now() + d;
                tokio::time::sleep(d).await;
                let woke = Instant::now();
                let late = if woke >= deadline {
                    (woke - deadline).as_nanos() as i64
                } else {
                    -((deadline - woke).as_nanos() as i64)
                };
                lates[i].store(late, Ordering::Relaxed);
                l.count_down();
            });
        }
        latch.wait().await;
        start.elapsed()
    });
    let mut v: Vec<i64> = late_ns.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    v.sort_unstable();
    let us = |ns: i64| ns as f64 / 1000.0;
    Sample {
        elapsed,
        extras: vec![
            ("total_ms", elapsed.as_secs_f64() * 1000.0),
            ("late_p50_us", us(percentile(&v, 50.0))),
            ("late_p99_us", us(percentile(&v, 99.0))),
            ("late_max_us", us(*v.last().unwrap_or(&0))),
        ],
    }
}

/// sleep_1ms: one task sleeps 1 ms, 1000 times in a row, on an otherwise idle
/// runtime, and records how late each sleep woke it. One op: one sleep.
fn sleep_1ms(rt: &Runtime) -> Sample {
    const COUNT: usize = 1000;
    let (elapsed, mut v) = on_worker(rt, async move {
        let mut late = Vec::with_capacity(COUNT);
        let start = Instant::now();
        for _ in 0..COUNT {
            let d = Duration::from_millis(1);
            let deadline = Instant::now() + d;
            tokio::time::sleep(d).await;
            let woke = Instant::now();
            late.push(if woke >= deadline {
                (woke - deadline).as_nanos() as i64
            } else {
                -((deadline - woke).as_nanos() as i64)
            });
        }
        (start.elapsed(), late)
    });
    v.sort_unstable();
    let us = |ns: i64| ns as f64 / 1000.0;
    Sample {
        elapsed,
        extras: vec![
            ("late_p50_us", us(percentile(&v, 50.0))),
            ("late_p99_us", us(percentile(&v, 99.0))),
            ("late_max_us", us(*v.last().unwrap_or(&0))),
        ],
    }
}

fn ops_of(name: &str, p: &Params) -> u64 {
    match name {
        "spawn_local" | "spawn_remote" => p.spawn_n as u64,
        "yield_many" => (p.yield_tasks * p.yield_count) as u64,
        "ping_pong" => (p.pairs * p.rounds) as u64,
        "chained_spawn" => p.chain_depth as u64,
        "fork_join" => 2 * fib_seq(p.fib_n + 1) - 1,
        "timers" => p.timers_n as u64,
        "sleep_1ms" => 1000,
        "select" | "select_fair" => (p.select_tasks / 2 * 2 * p.rounds) as u64,
        _ => unreachable!(),
    }
}

fn run_one(rt: &Runtime, name: &str, p: &Params) -> Sample {
    match name {
        "spawn_local" => spawn_local(rt, p),
        "spawn_remote" => spawn_remote(rt, p),
        "yield_many" => yield_many(rt, p),
        "ping_pong" => ping_pong(rt, p),
        "chained_spawn" => chained_spawn(rt, p),
        "fork_join" => fork_join(rt, p),
        "timers" => timers(rt, p),
        "sleep_1ms" => sleep_1ms(rt),
        "select" => select(rt, p, false),
        "select_fair" => select(rt, p, true),
        _ => unreachable!(),
    }
}

// ---------------------------------------------------------------------------
// Reporting
// ---------------------------------------------------------------------------

struct Report {
    workload: String,
    workers: usize,
    ops: u64,
    median: f64,
    min: f64,
    max: f64,
    extras: Vec<(&'static str, f64)>,
}

fn fmt1(x: f64) -> String {
    format!("{:.1}", x)
}

impl Report {
    fn line(&self) -> String {
        let mut s = format!(
            "bench {} runtime=tokio workers={} ops={} median_ns_per_op={} min_ns_per_op={} max_ns_per_op={}",
            self.workload,
            self.workers,
            self.ops,
            fmt1(self.median),
            fmt1(self.min),
            fmt1(self.max)
        );
        for (k, v) in &self.extras {
            s.push_str(&format!(" {}={}", k, fmt1(*v)));
        }
        s
    }
    fn json(&self) -> String {
        let mut s = format!(
            "{{\"workload\":\"{}\",\"runtime\":\"tokio\",\"workers\":{},\"ops\":{},\"median_ns_per_op\":{},\"min_ns_per_op\":{},\"max_ns_per_op\":{}",
            self.workload,
            self.workers,
            self.ops,
            fmt1(self.median),
            fmt1(self.min),
            fmt1(self.max)
        );
        for (k, v) in &self.extras {
            s.push_str(&format!(",\"{}\":{}", k, fmt1(*v)));
        }
        s.push('}');
        s
    }
}

/// 1 warm-up + `reps` measured repetitions. Extra fields are those of the
/// median repetition (for an even count, the lower of the two middle ones).
fn measure(rt: &Runtime, name: &str, o: &Options) -> Report {
    let ops = ops_of(name, &o.params);
    let warm = run_one(rt, name, &o.params);
    if o.verbose {
        eprintln!("# {name} warm-up: {:.3} ms", warm.elapsed.as_secs_f64() * 1e3);
    }
    let mut samples: Vec<(f64, Sample)> = Vec::with_capacity(o.reps);
    for r in 0..o.reps {
        let s = run_one(rt, name, &o.params);
        let per_op = s.elapsed.as_nanos() as f64 / ops as f64;
        if o.verbose {
            eprintln!("# {name} rep {r}: {:.3} ms, {:.1} ns/op {:?}", s.elapsed.as_secs_f64() * 1e3, per_op, s.extras);
        }
        samples.push((per_op, s));
    }
    samples.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    let k = samples.len();
    let median = if k % 2 == 1 {
        samples[k / 2].0
    } else {
        (samples[k / 2 - 1].0 + samples[k / 2].0) / 2.0
    };
    let mid = &samples[(k - 1) / 2].1;
    Report {
        workload: name.to_string(),
        workers: o.workers,
        ops,
        median,
        min: samples[0].0,
        max: samples[k - 1].0,
        extras: mid.extras.clone(),
    }
}

// ---------------------------------------------------------------------------
// tcp_echo server mode
// ---------------------------------------------------------------------------

/// Echo server on 127.0.0.1:PORT (0 = any free port); one task per connection,
/// reads up to 4 KiB and writes it all back (TCP_NODELAY on each accepted
/// socket). Prints `listening 127.0.0.1:P workers=W` once bound (the form
/// asyncrt-bench and the Go peer print too), then serves until killed.
fn echo_server(rt: &Runtime, port: u16, workers: usize) -> ! {
    let r: std::io::Result<()> = on_worker(rt, async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let bound = listener.local_addr()?.port();
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "listening 127.0.0.1:{bound} workers={workers}")?;
            out.flush()?;
        }
        loop {
            let (mut sock, _) = listener.accept().await?;
            let _ = sock.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    let n = match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if sock.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    match r {
        Ok(()) => exit(0),
        Err(e) => {
            eprintln!("echo server: {e}");
            exit(1)
        }
    }
}

// ---------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------

const USAGE: &str = "\
usage: tokio-peer-bench [--workers W] [--reps R] [--only NAME] [--json FILE] [--verbose]
                        [--spawn-n N] [--yield-tasks T] [--yield-count Y] [--pairs P]
                        [--rounds R] [--chain-depth D] [--fib N] [--timers-n N]
                        [--select-tasks T]
       tokio-peer-bench --echo-server PORT [--workers W]
           (PORT 0: any free port; prints `listening 127.0.0.1:PORT workers=W`)
workloads: spawn_local spawn_remote yield_many ping_pong chained_spawn fork_join timers select
           (tcp_echo: `bench/peers/run tokio --only tcp_echo` starts --echo-server
            and drives it with the load generator of bench/echo_client.c)";

fn die(msg: &str) -> ! {
    eprintln!("tokio-peer-bench: {msg}\n{USAGE}");
    exit(2)
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> T {
    v.parse().unwrap_or_else(|_| die(&format!("bad value for {flag}: {v}")))
}

fn parse_args() -> Options {
    let mut o = Options {
        workers: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        reps: 5,
        only: None,
        json: None,
        echo_server: None,
        verbose: false,
        params: Params::default(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut val = || inline.clone().or_else(|| args.next()).unwrap_or_else(|| die(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--workers" => o.workers = parse_num(&flag, &val()),
            "--reps" => o.reps = parse_num(&flag, &val()),
            "--only" => o.only = Some(val()),
            "--json" => o.json = Some(val()),
            "--echo-server" => o.echo_server = Some(parse_num(&flag, &val())),
            "--verbose" | "-v" => o.verbose = true,
            "--spawn-n" => o.params.spawn_n = parse_num(&flag, &val()),
            "--yield-tasks" => o.params.yield_tasks = parse_num(&flag, &val()),
            "--yield-count" => o.params.yield_count = parse_num(&flag, &val()),
            "--pairs" => o.params.pairs = parse_num(&flag, &val()),
            "--rounds" => o.params.rounds = parse_num(&flag, &val()),
            "--chain-depth" => o.params.chain_depth = parse_num(&flag, &val()),
            "--fib" => o.params.fib_n = parse_num(&flag, &val()),
            "--timers-n" => o.params.timers_n = parse_num(&flag, &val()),
            "--select-tasks" => o.params.select_tasks = parse_num(&flag, &val()),
            "--help" | "-h" => {
                println!("{USAGE}");
                exit(0)
            }
            _ => die(&format!("unknown argument: {a}")),
        }
    }
    if o.workers == 0 {
        die("--workers must be >= 1");
    }
    if o.reps == 0 {
        die("--reps must be >= 1");
    }
    if let Some(name) = &o.only {
        if name == "tcp_echo" {
            eprintln!(
                "tokio-peer-bench: tcp_echo needs the external client; run `bench/peers/run tokio --only tcp_echo` \
                 (this binary is its server: --echo-server PORT)"
            );
            exit(2);
        }
        if !WORKLOADS.contains(&name.as_str()) {
            die(&format!("unknown workload: {name}"));
        }
    }
    o
}

fn main() {
    let o = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(o.workers)
        .enable_all()
        .build()
        .expect("cannot build the tokio runtime");

    if let Some(port) = o.echo_server {
        echo_server(&rt, port, o.workers);
    }

    let names: Vec<&str> = match &o.only {
        Some(n) => vec![n.as_str()],
        None => WORKLOADS.to_vec(),
    };
    let mut reports = Vec::new();
    for name in names {
        let rep = measure(&rt, name, &o);
        println!("{}", rep.line());
        let _ = std::io::stdout().flush();
        reports.push(rep);
    }
    if let Some(path) = &o.json {
        let body: Vec<String> = reports.iter().map(|r| r.json()).collect();
        let text = format!("[\n  {}\n]\n", body.join(",\n  "));
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("tokio-peer-bench: cannot write {path}: {e}");
            exit(1);
        }
    }
}
