// Command kube-scheduler places pods on kwok's fake nodes, built from the
// pinned k8s.io/kubernetes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
