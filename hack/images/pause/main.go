// Command pause is the pod sandbox process of the registry.k8s.io/pause
// image that hack/images builds: it holds the pod's namespaces open until
// SIGINT or SIGTERM, then exits 0, and reaps the zombies of processes
// whose parent died (it is PID 1 of a pod sharing its PID namespace).
package main

import (
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Signals coalesce: reap every child that has exited.
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
