// Command connector is the Go version of examples/connector.c: N clients at
// once, each connecting to 127.0.0.1:PORT, sending "ping\n" and expecting
// it echoed back, all within MS milliseconds of its start.
//
//	connector --port P [--count N] [--timeout-ms MS] [--workers W]
//
// Prints "ok K failed F" and, when F > 0, the first error; exits 0 when
// every client succeeded.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"
)

func client(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return err
	}
	reply := make([]byte, 5)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return err
	}
	if !bytes.Equal(reply, []byte("ping\n")) {
		return errors.New("protocol error")
	}
	return nil
}

func main() {
	port := flag.Int("port", 0, "the echo server's port")
	count := flag.Int("count", 100, "clients")
	timeoutMs := flag.Int("timeout-ms", 2000, "each client's deadline")
	workers := flag.Int("workers", 0, "threads running goroutines (0: all CPUs)")
	flag.Parse()
	if *port <= 0 || *port > 65535 || *count <= 0 {
		fmt.Fprintln(os.Stderr, "usage: connector --port P [--count N] [--timeout-ms MS] [--workers W]")
		os.Exit(2)
	}
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", *port)
	results := make(chan error)
	for i := 0; i < *count; i++ {
		go func() { results <- client(addr, time.Duration(*timeoutMs)*time.Millisecond) }()
	}
	ok := 0
	var first error
	for i := 0; i < *count; i++ {
		if err := <-results; err == nil {
			ok++
		} else if first == nil {
			first = err
		}
	}
	fmt.Printf("ok %d failed %d\n", ok, *count-ok)
	if first != nil {
		fmt.Println("first error:", first)
		os.Exit(1)
	}
}
