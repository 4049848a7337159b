// Command http_hello_net is the Go version of examples/http_hello.c on
// plain net, answering with the same bytes: an HTTP/1.1 server that
// answers every GET with "hello", keeps connections alive, answers
// pipelined requests together, closes after "Connection: close" (and
// after an HTTP/1.0 request without "Connection: keep-alive"), and
// answers anything else with 400 and a close.
//
//	http_hello_net [--port P] [--workers W]
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
	"syscall"
)

const (
	hello      = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
	helloClose = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
	bad        = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)

var errBad = errors.New("bad request")

// request reads one request head and says whether the connection stays
// open after the answer.
func request(in *bufio.Reader) (bool, error) {
	line, err := in.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	f := strings.Fields(string(line))
	if len(f) != 3 || f[0] != "GET" || (f[2] != "HTTP/1.1" && f[2] != "HTTP/1.0") {
		return false, errBad
	}
	keep := f[2] == "HTTP/1.1"
	for {
		if line, err = in.ReadSlice('\n'); err != nil {
			return false, err
		}
		header := strings.TrimRight(string(line), "\r\n")
		if header == "" {
			return keep, nil
		}
		name, value, ok := strings.Cut(header, ":")
		if !ok {
			return false, errBad
		}
		if strings.EqualFold(name, "Connection") {
			value = strings.TrimSpace(value)
			keep = strings.EqualFold(value, "keep-alive") || (keep && !strings.EqualFold(value, "close"))
		}
	}
}

func serve(conn net.Conn) {
	defer conn.Close()
	in := bufio.NewReaderSize(conn, 8192)
	out := bufio.NewWriter(conn)
	defer out.Flush()
	for {
		keep, err := request(in)
		if err != nil {
			if err == errBad || err == bufio.ErrBufferFull {
				out.WriteString(bad)
			}
			return
		}
		if !keep {
			out.WriteString(helloClose)
			return
		}
		out.WriteString(hello)
		// Pipelined requests: answer every complete one read already, then
		// send the answers together.
		rest, _ := in.Peek(in.Buffered())
		if !bytes.Contains(rest, []byte("\r\n\r\n")) && out.Flush() != nil {
			return
		}
	}
}

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
		fmt.Fprintln(os.Stderr, "http_hello_net:", err)
		os.Exit(1)
	}
	fmt.Println("listening", ln.Addr())
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(conn)
		}
	}()
	<-stop
}
