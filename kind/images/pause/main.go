// Command pause is the sandbox process of every pod on the kind tier's offline node image: it
// holds the pod's namespaces, reaps the zombies it inherits as PID 1, and exits on SIGINT or
// SIGTERM. No registry is reachable here, so the node cannot pull the upstream pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
