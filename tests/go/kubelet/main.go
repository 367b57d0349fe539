// kubelet-stand-in serves the one kubelet API that Cluster API's kubeadm control-plane provider
// reaches through a workload cluster's API server: port forwarding into a control-plane node's
// static pods (GET /portForward/{namespace}/{pod}, SPDY or WebSocket), with the kubelet's own
// streaming library. It checks etcd members and the API server's certificate that way. Each pod
// port is forwarded to the address given for it with --forward. Part of capms's node stand-in
// (crates/metal-sim/src/workload): one process per control-plane node, listening on the node's loopback
// address only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/portforward"
)

// forwards maps "<pod>:<port>" to the "<host>:<port>" that answers for it.
type forwards map[string]string

func (f forwards) String() string { return fmt.Sprint(map[string]string(f)) }

func (f forwards) Set(value string) error {
	from, to, ok := strings.Cut(value, "=")
	if !ok {
		return fmt.Errorf("--forward %q: want <pod>:<port>=<host>:<port>", value)
	}
	f[from] = to
	return nil
}

// PortForward copies between the stream and the address forwarded for the pod's port.
func (f forwards) PortForward(ctx context.Context, pod string, _ string, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	target, ok := f[fmt.Sprintf("%s:%d", pod, port)]
	if !ok {
		return fmt.Errorf("pod %s has no port %d", pod, port)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "tcp", target)
	if err != nil {
		return fmt.Errorf("pod %s port %d: %w", pod, port, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

func main() {
	listen := flag.String("listen", "", "address to serve on (a loopback address and port)")
	cert := flag.String("cert", "", "serving certificate (PEM)")
	key := flag.String("key", "", "serving key (PEM)")
	f := forwards{}
	flag.Var(f, "forward", "<pod>:<port>=<host>:<port>, repeatable")
	flag.Parse()
	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("--listen %q: want a loopback address and port", *listen)
	}
	http.HandleFunc("/portForward/", func(w http.ResponseWriter, req *http.Request) {
		path := strings.Split(strings.TrimPrefix(req.URL.Path, "/portForward/"), "/")
		if len(path) < 2 {
			http.Error(w, "want /portForward/{namespace}/{pod}", http.StatusBadRequest)
			return
		}
		options, err := portforward.NewV4Options(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		portforward.ServePortForward(w, req, f, path[1], "", options,
			4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	log.Printf("kubelet stand-in on %s forwarding %v", *listen, f)
	log.Fatal(http.ListenAndServeTLS(*listen, *cert, *key, nil))
}
