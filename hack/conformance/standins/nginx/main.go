// Command nginx is rtshimd conformance's stand-in for the nginx web-server images that
// critest uses (e2e-test-images/nginx and hostnet-nginx). It is NOT nginx; it
// only reproduces what the CRI conformance tests observe of nginx:
//
//   - the process is called "nginx" (comm) so `pidof nginx` finds it;
//   - its command line reads "nginx: master process ..." like a real nginx
//     master (tests grep /proc/1/cmdline for "master process");
//   - it writes its PID to /var/run/nginx.pid;
//   - it serves /usr/share/nginx/html over HTTP on every port named by a
//     `listen N;` directive in /etc/nginx/conf.d/*.conf (default 80);
//   - it exits on SIGTERM, SIGINT and SIGQUIT.
package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	masterTitle = "nginx: master process"
	confGlob    = "/etc/nginx/conf.d/*.conf"
	docRoot     = "/usr/share/nginx/html"
	pidFile     = "/var/run/nginx.pid"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "-V") {
		fmt.Fprintln(os.Stderr, "nginx version: rtshimd-conformance-stand-in/1.0")
		return
	}
	// Re-exec ourselves with a "master process" title, the way nginx rewrites
	// its argv. The executable path keeps its basename, so comm stays "nginx".
	if !strings.HasPrefix(os.Args[0], masterTitle) {
		exe, err := os.Executable()
		if err == nil {
			title := masterTitle + " " + strings.Join(os.Args, " ")
			err = syscall.Exec(exe, []string{title}, os.Environ())
		}
		fmt.Fprintf(os.Stderr, "nginx: cannot re-exec with process title: %v\n", err)
	}

	ports := listenPorts()
	if err := os.MkdirAll(filepath.Dir(pidFile), 0o755); err == nil {
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "nginx: cannot write %s: %v\n", pidFile, err)
		}
	}

	handler := logRequests(http.FileServer(http.Dir(docRoot)))
	errc := make(chan error, len(ports))
	var servers []*http.Server
	for _, p := range ports {
		srv := &http.Server{Addr: ":" + strconv.Itoa(p), Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go func() { errc <- srv.ListenAndServe() }()
		fmt.Fprintf(os.Stderr, "nginx: rtshimd conformance stand-in serving %s on :%d (pid %d)\n", docRoot, p, os.Getpid())
	}

	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT)
	code := 0
	select {
	case s := <-sigc:
		fmt.Fprintf(os.Stderr, "nginx: got signal %v, exiting\n", s)
	case err := <-errc:
		fmt.Fprintf(os.Stderr, "nginx: server failed: %v\n", err)
		code = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
	cancel()
	_ = os.Remove(pidFile)
	os.Exit(code)
}

// listenPorts collects `listen N;` directives from the conf.d files.
func listenPorts() []int {
	var ports []int
	seen := map[int]bool{}
	files, _ := filepath.Glob(confGlob)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(strings.TrimSpace(sc.Text()))
			if len(fields) < 2 || fields[0] != "listen" {
				continue
			}
			v := strings.TrimSuffix(fields[1], ";")
			if i := strings.LastIndex(v, ":"); i >= 0 {
				v = v[i+1:]
			}
			if p, err := strconv.Atoi(v); err == nil && p > 0 && !seen[p] {
				seen[p] = true
				ports = append(ports, p)
			}
		}
		fh.Close()
	}
	if len(ports) == 0 {
		ports = []int{80}
	}
	return ports
}

func logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		fmt.Fprintf(os.Stdout, "%s - - [%s] \"%s %s %s\" \"%s\"\n", r.RemoteAddr,
			time.Now().Format("02/Jan/2006:15:04:05 -0700"), r.Method, r.URL.RequestURI(), r.Proto, r.UserAgent())
	})
}
