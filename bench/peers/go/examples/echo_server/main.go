// Command echo_server is the Go version of examples/echo_server.c: a TCP
// echo server on 127.0.0.1, one goroutine per connection, that stops on
// SIGINT or SIGTERM with exit status 0.
//
//	echo_server [--port P] [--workers W]   (P 0: any free port; W 0: all CPUs)
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

func main() {
	port := flag.Int("port", 0, "port to listen on (0: any free port)")
	workers := flag.Int("workers", 0, "threads running goroutines (0: all CPUs)")
	flag.Parse()
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo_server:", err)
		os.Exit(1)
	}
	fmt.Println("listening", ln.Addr())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				io.Copy(conn, conn)
				conn.Close()
			}()
		}
	}()
	<-stop
}
