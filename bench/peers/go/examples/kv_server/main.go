// Command kv_server is the Go version of examples/kv_server.c: a line-based
// key-value server, one goroutine per connection, a shared map behind a
// mutex, an idle timeout per connection, and on SIGINT or SIGTERM a
// goodbye to every open connection before it exits with status 0.
//
//	kv_server [--port P] [--workers W] [--idle-ms MS]
//
// SET key value -> OK; GET key -> the value or NOT_FOUND; DEL key -> OK or
// NOT_FOUND; anything else -> ERR <reason>.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

var (
	mu       sync.Mutex
	store    = map[string]string{}
	stopping = make(chan struct{}) // closed on SIGINT or SIGTERM
	open     sync.Map              // the open connections
	conns    sync.WaitGroup
)

func apply(line string) string {
	f := strings.Fields(line)
	args := map[string]int{"SET": 3, "GET": 2, "DEL": 2}
	switch {
	case len(f) == 0:
		return "ERR empty command"
	case args[f[0]] == 0:
		return "ERR unknown command"
	case len(f) != args[f[0]]:
		return "ERR wrong number of arguments"
	}
	mu.Lock()
	defer mu.Unlock()
	v, found := store[f[1]]
	switch f[0] {
	case "SET":
		store[f[1]] = f[2]
		return "OK"
	case "GET":
		if found {
			return v
		}
	case "DEL":
		if found {
			delete(store, f[1])
			return "OK"
		}
	}
	return "NOT_FOUND"
}

func serve(conn net.Conn, idle time.Duration) {
	defer conns.Done()
	defer conn.Close()
	open.Store(conn, true)
	defer open.Delete(conn)
	in := bufio.NewReaderSize(conn, 1024)
	out := bufio.NewWriter(conn)
	defer out.Flush()
	for {
		conn.SetReadDeadline(time.Now().Add(idle))
		line, err := in.ReadSlice('\n')
		if err != nil {
			var timeout net.Error
			select {
			case <-stopping:
				out.WriteString("ERR server shutting down\n")
			default:
				if errors.As(err, &timeout) && timeout.Timeout() {
					out.WriteString("ERR idle timeout\n")
				} else if err == bufio.ErrBufferFull {
					out.WriteString("ERR line too long\n")
				}
			}
			return
		}
		out.WriteString(apply(strings.TrimRight(string(line), "\r\n")) + "\n")
		// Pipelined commands: answer every complete one read already, then
		// send the replies together.
		rest, _ := in.Peek(in.Buffered())
		if bytes.IndexByte(rest, '\n') < 0 && out.Flush() != nil {
			return
		}
	}
}

func main() {
	port := flag.Int("port", 0, "port to listen on (0: any free port)")
	workers := flag.Int("workers", 0, "threads running goroutines (0: all CPUs)")
	idleMs := flag.Int("idle-ms", 30000, "how long a connection may stay silent")
	flag.Parse()
	if *workers > 0 {
		runtime.GOMAXPROCS(*workers)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kv_server:", err)
		os.Exit(1)
	}
	fmt.Println("listening", ln.Addr())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go serve(conn, time.Duration(*idleMs)*time.Millisecond)
		}
	}()
	<-stop
	ln.Close()
	close(stopping)
	open.Range(func(conn, _ any) bool {
		conn.(net.Conn).SetReadDeadline(time.Now()) // ends its read at once
		return true
	})
	conns.Wait()
}
