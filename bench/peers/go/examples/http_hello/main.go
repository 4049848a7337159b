// Command http_hello is the Go version of examples/http_hello.c on
// net/http: every GET is answered with "hello" (net/http adds its own
// headers), and the server stops on SIGINT or SIGTERM with exit status 0.
//
//	http_hello [--port P] [--workers W]
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
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
		fmt.Fprintln(os.Stderr, "http_hello:", err)
		os.Exit(1)
	}
	fmt.Println("listening", ln.Addr())
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "", http.StatusBadRequest)
			return
		}
		w.Write([]byte("hello"))
	})}
	go server.Serve(ln)
	<-stop
}
